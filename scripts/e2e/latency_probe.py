"""A plain consumer of the input topic in a group of its own, run beside the worker by bench_e2e.py --probe: writes
"number record-timestamp arrival" (milliseconds) per event to a file until it is sent SIGTERM. A process of its
own, so that the producing benchmark does not hold it up.

    python3 latency_probe.py BOOTSTRAP_SERVERS OUT_FILE
"""

import signal
import sys
import time

from confluent_kafka import Consumer

import harness as h


def main():
    servers, out = sys.argv[1], sys.argv[2]
    stopped = []
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "latency-probe", "log_level": 3,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "receive.message.max.bytes": 1000000000,
                         # librdkafka's mock cluster holds an empty fetch this long even when records arrive.
                         "fetch.wait.max.ms": 10})
    consumer.subscribe([h.INPUT])
    deadline = time.time() + 60
    while not consumer.assignment() and time.time() < deadline:  # joined, so the first events are not held up
        consumer.poll(0.1)
    with open(out, "w") as f:
        print("ready", flush=True)
        while not stopped:
            # One at a time: a batch call waits for its count or its timeout, and that wait would be counted.
            message = consumer.poll(0.1)
            if message is None or message.error():
                continue
            now = int(time.time() * 1000)
            number = h.NUMBER.search(message.value())
            if number:
                f.write(f"{number.group(1).decode()} {number.group(2).decode()} {now}\n")
    consumer.close()


if __name__ == "__main__":
    main()
