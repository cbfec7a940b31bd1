"""Reading back what an end-to-end run delivered: the simulator's record file (delivered numbers, duplicates,
latencies), whole topics, and a plain consumer beside the worker (scripts/e2e/latency_probe.py). Used through
harness.py, which re-exports these names."""

import os
import re
import signal
import subprocess
import time

from confluent_kafka import Consumer, TopicPartition

# The input topic the runs produce their events to.
INPUT = "notifications"
NUMBER = re.compile(rb'"n":(\d+),"ts":(\d+)')
TIME = re.compile(rb'"time_ms":(\d+)')


class RecordReader:
    """Reads the simulator's record file incrementally: delivered numbers, duplicates, latencies."""

    def __init__(self, path, keep_latency=False):
        self.path = path
        self.offset = 0
        self.seen = set()
        self.lines = 0
        self.first_ms = None
        self.last_ms = None
        self.keep_latency = keep_latency
        self.latencies = []
        # With keep_latency: event number -> (record timestamp, receipt), first receipt only.
        self.receipts = {}

    def update(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1
        self.offset += end
        for line in data[:end].splitlines():
            number = NUMBER.search(line)
            received = TIME.search(line)
            if not number or not received:
                continue
            self.lines += 1
            self.seen.add(int(number.group(1)))
            ms = int(received.group(1))
            self.first_ms = ms if self.first_ms is None else min(self.first_ms, ms)
            self.last_ms = ms if self.last_ms is None else max(self.last_ms, ms)
            if self.keep_latency:
                self.latencies.append(ms - int(number.group(2)))
                self.receipts.setdefault(int(number.group(1)), (int(number.group(2)), ms))

    @property
    def duplicates(self):
        return self.lines - len(self.seen)


def read_topic(servers, topic):
    """Every record value of a topic, read from the beginning to its end outside any group."""
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "e2e-reader", "enable.auto.commit": False, "log_level": 3,
                         "receive.message.max.bytes": 1000000000})
    metadata = consumer.list_topics(topic, timeout=10)
    partitions = [TopicPartition(topic, p, 0) for p in metadata.topics[topic].partitions]
    ends = {p.partition: consumer.get_watermark_offsets(p, timeout=10)[1] for p in partitions}
    consumer.assign(partitions)
    values = []
    remaining = {p: end for p, end in ends.items() if end > 0}
    deadline = time.time() + 60
    while remaining and time.time() < deadline:
        for message in consumer.consume(1000, 0.5):
            if message.error():
                continue
            values.append(message.value())
            if message.offset() + 1 >= remaining.get(message.partition(), 0):
                remaining.pop(message.partition(), None)
    consumer.close()
    return values


def numbers_in_input(servers):
    """The event numbers the input topic holds."""
    return {int(m.group(1)) for v in read_topic(servers, INPUT) for m in [NUMBER.search(v)] if m}


def percentile(sorted_values, q):
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))
    return sorted_values[index]


class LatencyProbe:
    """scripts/e2e/latency_probe.py in a process of its own: a plain consumer of the input topic beside the worker,
    recording when each event reached a consumer at all. Tells the broker's and the machine's share of the latency
    from the worker's."""

    def __init__(self, servers, workdir):
        self.path = os.path.join(workdir, "probe.txt")
        self.process = subprocess.Popen(
            ["python3", os.path.join(os.path.dirname(os.path.abspath(__file__)), "latency_probe.py"), servers, self.path],
            stdout=subprocess.PIPE, text=True)
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError("the latency probe did not start")

    def stop(self):
        """Stops it; returns event number -> (record timestamp, arrival), first arrival only."""
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=30)
        arrivals = {}
        with open(self.path) as f:
            for line in f:
                n, ts, arrived = (int(x) for x in line.split())
                arrivals.setdefault(n, (ts, arrived))
        return arrivals


