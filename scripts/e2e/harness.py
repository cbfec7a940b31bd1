"""The end-to-end harness behind scripts/bench-e2e and scripts/fault-matrix.

It runs the real processes: the test broker (noida-db, scripts/kafka-broker), `pushworker simulate` and
`pushworker run`, produces notification events with confluent-kafka (PyPI), and reads the outcome back from the
simulator's record file (what reached the gateway) and the delivery error topic (what did not).

Every event carries its number `n` in the payload and its produce time `ts` (UNIX ms), which is also the Kafka
record's timestamp (set explicitly), so the record file alone gives delivered, duplicates and the latency from
record timestamp to the simulator's receipt.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.request

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
APP = "com.example.app"
ERRORS, FEEDBACK = "notification-errors", "notification-feedback"
# The compacted topic of suppressed tokens (SPEC section 10), for the runs that turn suppression on.
SUPPRESSED = "suppressed-tokens"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# The provider-token key scripts/gen-pki makes (AuthKey_KEY1234567.p8).
TEAM_ID, KEY_ID = "TEAM123456", "KEY1234567"

# What a run delivered, read back (the simulator's record file, topics, a plain consumer beside the worker).
from outcomes import INPUT, NUMBER, TIME, LatencyProbe, RecordReader, numbers_in_input, percentile, read_topic  # noqa: E402,F401


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def token(n):
    """A distinct 32-byte device token per event number."""
    return "%064x" % ((n * 0x9E3779B97F4A7C15 + 0xA5A5) % (1 << 256))


def short_event_id(n):
    return "e%d" % n


def uuid_event_id(n):
    """An id as many producers make them: a UUID, lowercase (a fixed pattern around n, distinct per n)."""
    return "%08x-%04x-4%03x-8%03x-%012x" % (n, (n * 7) & 0xFFFF, n & 0xFFF, (n >> 12) & 0xFFF, n * 0x9E3779B1 % (1 << 48))


# How events are named; scripts may set it to `uuid_event_id`.
event_id = short_event_id


def record_key(n):
    """The Kafka key of event n's record."""
    return b"e%d" % n


def event(n, size, ts, device_token=None):
    """A notification event whose payload is about `size` bytes and carries n and ts (to `token(n)` unless told)."""
    head = '{"aps":{"alert":"Event %d","sound":"default"},"n":%d,"ts":%d,"pad":"' % (n, n, ts)
    payload = head + "x" * max(0, size - len(head) - 2) + '"}'
    return ('{"id":"%s","app":"%s","token":"%s","payload":%s}' % (event_id(n), APP, device_token or token(n), payload)).encode()


class Broker:
    """noida-db through scripts/kafka-broker: start, stop, restart on the same data and port."""

    def __init__(self, workdir, port=None):
        self.dir = os.path.join(workdir, "kafka")
        self.port = port or free_port()
        self.servers = None

    def start(self):
        out = subprocess.run([f"{ROOT}/scripts/kafka-broker", "start", self.dir, str(self.port)],
                             check=True, capture_output=True, text=True)
        self.servers = out.stdout.strip().splitlines()[-1]
        return self.servers

    def stop(self):
        subprocess.run([f"{ROOT}/scripts/kafka-broker", "stop", self.dir], check=False, capture_output=True)

    def create_topics(self, partitions=6, suppression=False):
        admin = AdminClient({"bootstrap.servers": self.servers, "log_level": 3})
        topics = [NewTopic(INPUT, partitions, 1), NewTopic(ERRORS, 3, 1), NewTopic(FEEDBACK, 1, 1)]
        if suppression:
            topics.append(NewTopic(SUPPRESSED, 1, 1, config={"cleanup.policy": "compact"}))
        futures = admin.create_topics(topics)
        for future in futures.values():
            future.result(30)


class MockBroker:
    """librdkafka's mock cluster hosted in a process of its own (kafka-test-helper, built next to pushworker), with
    the three topics. It keeps only the last 5 MiB of each partition, so it serves runs whose backlog stays small
    (the fixed-rate mode), or a backlog spread over enough partitions (`bench_e2e.mock_partitions_for`): unlike
    noida-db, its memory does not grow with every record ever produced, and it answers a fetch with one of the
    producer's batches a partition."""

    def __init__(self, helper, partitions=6):
        """`partitions`: the input topic's (the mock has no admin API for topics, so they are made at the start)."""
        self.helper = helper
        self.partitions = partitions
        self.process = None
        self.servers = None

    def start(self):
        self.process = subprocess.Popen([self.helper, "mock-cluster", f"{INPUT}:{self.partitions}", f"{ERRORS}:3",
                                         f"{FEEDBACK}:1"],
                                        stdout=subprocess.PIPE, text=True)
        self.servers = self.process.stdout.readline().strip()
        return self.servers

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)

    def create_topics(self, partitions=6):
        """They exist from the start, the input topic with the constructor's partitions."""
        if partitions != self.partitions:
            raise ValueError(f"the mock cluster's input topic has {self.partitions} partitions, not {partitions}")


class EventProducer:
    """Produces events 0..count-1 with their timestamps, as a backlog or at a fixed rate."""

    def __init__(self, servers, token_for=None, linger_ms=1):
        """`token_for(n)`: the device token of event n, when not `token(n)`. `linger_ms`: how long a batch waits
        for more records (a backlog meant for the mock cluster is produced in large batches: it answers a fetch with
        one batch a partition)."""
        self.producer = Producer({"bootstrap.servers": servers, "linger.ms": linger_ms, "acks": "all", "log_level": 3,
                                  "queue.buffering.max.messages": 1000000})
        self.token_for = token_for
        self.failed = 0

    def _delivered(self, error, _message):
        if error is not None:
            self.failed += 1

    def _produce(self, n, size, ts):
        while True:
            try:
                device_token = self.token_for(n) if self.token_for else None
                self.producer.produce(INPUT, event(n, size, ts, device_token), key=record_key(n), timestamp=ts,
                                      on_delivery=self._delivered)
                return
            except BufferError:
                self.producer.poll(0.01)

    def backlog(self, count, size):
        for n in range(count):
            self._produce(n, size, int(time.time() * 1000))
            if n % 10000 == 0:
                self.producer.poll(0)
        return self.finish()

    def at_rate(self, rate, seconds, size, start=0, on_progress=None):
        """rate events/s for seconds, in 5 ms slices; returns how many were produced."""
        total = int(rate * seconds)
        began = time.monotonic()
        n = 0
        while n < total:
            due = min(total, int((time.monotonic() - began) * rate) + 1)
            now = int(time.time() * 1000)
            while n < due:
                self._produce(start + n, size, now)
                n += 1
            self.producer.poll(0)
            if on_progress:
                on_progress(n)
            time.sleep(0.005)
        self.finish()
        return n

    def finish(self):
        left = self.producer.flush(120)
        if left or self.failed:
            raise RuntimeError(f"producing the events failed: {left} unsent, {self.failed} refused")
        return True


class Simulator:
    """`pushworker simulate` on free (or given) ports, recording to a file."""

    def __init__(self, binary, workdir, faults=(), gateway_port=0, feedback_port=0, api_port=None):
        """With `api_port`, the HTTP/2 API is served too, with provider-token authentication (the PKI's key)."""
        self.record = os.path.join(workdir, "record.jsonl")
        self.log = open(os.path.join(workdir, "simulator.log"), "ab")
        pki = f"{ROOT}/pki"
        api = [] if api_port is None else [
            "--api-port", str(api_port), "--token-key", f"{pki}/token-key.pub.pem", "--team-id", TEAM_ID,
            "--key-id", KEY_ID]
        self.process = subprocess.Popen(
            [binary, "simulate", "--cert", f"{pki}/server.pem", "--key", f"{pki}/server-key.pem", "--ca", f"{pki}/ca.pem",
             "--gateway-port", str(gateway_port), "--feedback-port", str(feedback_port), "--record", self.record,
             "--log-level", "error", *api, *faults],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        listening = json.loads(self.process.stdout.readline())
        self.gateway = int(listening["gateway"].rsplit(":", 1)[1])
        self.feedback = int(listening["feedback"].rsplit(":", 1)[1])
        self.api = int(listening["api"].rsplit(":", 1)[1]) if "api" in listening else None

    def stop(self):
        """SIGTERM; returns the simulator's summary."""
        self.process.send_signal(signal.SIGTERM)
        summary = {}
        for line in self.process.stdout:
            if line.startswith('{"summary"'):
                summary = json.loads(line)["summary"]
        self.process.wait(30)
        return summary


def worker_config(workdir, servers, gateway_port, feedback_port, http_port, max_in_flight=100000, connections=2,
                  reconnect=(500, 60000, 30), instance="bench-worker-1", acceptance_ms=1000, log_level="warning",
                  consumer_properties=None, protocol=None, api_port=None, suppression=False, group_id="pushworker-e2e",
                  idle_fetch_pace_ms=None):
    """The worker's configuration; with `api_port`, the app goes over the HTTP/2 API with token authentication;
    with `suppression`, tokens reported gone are shared through SUPPRESSED; `idle_fetch_pace_ms` replaces the
    worker's default (None keeps it)."""
    pki = f"{ROOT}/pki"
    path = os.path.join(workdir, "pushworker.yaml")
    # Given properties replace these defaults (a session timeout for a worker run under a profiler, say).
    properties = {"session.timeout.ms": "6000", "group.instance.id": instance, "receive.message.max.bytes": "1000000000"}
    properties.update(consumer_properties or {})
    consumer_block = "".join(f'    {key}: "{value}"\n' for key, value in properties.items())
    if api_port is None:
        app = f"""    transport: binary
    certificate: {pki}/app.pem
    private_key: {pki}/app-key.pem
    gateway: "127.0.0.1:{gateway_port}"
    feedback: "127.0.0.1:{feedback_port}"
    connections: {connections}
{f"    protocol: {protocol}{chr(10)}" if protocol else ""}"""
    else:
        app = f"""    transport: http2
    auth: token
    team_id: {TEAM_ID}
    key_id: {KEY_ID}
    signing_key: {pki}/AuthKey_{KEY_ID}.p8
    api: "127.0.0.1:{api_port}"
    connections: {connections}
"""
    with open(path, "w") as f:
        f.write(f"""kafka:
  brokers: "{servers}"
  group_id: {group_id}
  input_topics: [{INPUT}]
  delivery_error_topic: {ERRORS}
  feedback_topic: {FEEDBACK}
{f"  idle_fetch_pace_ms: {idle_fetch_pace_ms}{chr(10)}" if idle_fetch_pace_ms is not None else ""}  consumer_properties:
{consumer_block}apps:
  - bundle_id: {APP}
    environment: production
{app}tls:
  ca_file: {pki}/ca.pem
delivery:
  acceptance_window_ms: {acceptance_ms}
  max_in_flight: {max_in_flight}
  reconnect: {{ initial_ms: {reconnect[0]}, max_ms: {reconnect[1]}, reset_after_s: {reconnect[2]} }}
feedback:
  interval_s: 86400
  spool_dir: {workdir}/spool
{f"suppression:{chr(10)}  topic: {SUPPRESSED}{chr(10)}" if suppression else ""}http:
  listen: "127.0.0.1:{http_port}"
log:
  level: {log_level}
  format: json
""")
    return path


def image_environment(name):
    """The value deploy/Dockerfile's ENV gives `name` (None when it gives none): the worker runs here as in the image."""
    dockerfile = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy", "Dockerfile")
    with open(dockerfile) as f:
        match = re.search(rf"\b{name}=(\S+)", f.read())
    return match.group(1) if match else None


class Worker:
    """`pushworker run`; its CPU time and peak RSS come from /proc while it runs."""

    def __init__(self, binary, config, workdir, http_port):
        self.http_port = http_port
        self.log = open(os.path.join(workdir, "worker.log"), "ab")
        self.started = time.time()
        # The worker refuses PUSHWORKER_* variables it does not know; the harness's configuration file says it all.
        environment = {k: v for k, v in os.environ.items() if not k.startswith("PUSHWORKER_")}
        # The allocator's settings are the image's (its top pad), unless the caller's environment sets its own.
        tunables = image_environment("GLIBC_TUNABLES")
        if tunables:
            environment.setdefault("GLIBC_TUNABLES", tunables)
        self.process = subprocess.Popen([binary, "run", "--config", config], stdout=self.log, stderr=self.log,
                                        env=environment)

    def proc(self):
        """(cpu seconds, peak RSS bytes, current RSS bytes) so far."""
        with open(f"/proc/{self.process.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        status = {}
        with open(f"/proc/{self.process.pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                status[key] = value.strip()
        return cpu, int(status["VmHWM"].split()[0]) * 1024, int(status["VmRSS"].split()[0]) * 1024

    def threads(self):
        """(name, fields after the name) of each of the worker's threads now, from /proc/PID/task/*/stat."""
        task_dir = f"/proc/{self.process.pid}/task"
        for tid in os.listdir(task_dir):
            try:
                with open(f"{task_dir}/{tid}/stat") as f:
                    head, _, rest = f.read().rpartition(")")
            except OSError:
                continue
            yield head.partition("(")[2], rest.split()

    def thread_cpu(self):
        """CPU seconds so far by thread kind: librdkafka's own threads ("rdk:...") and the rest (the worker's)."""
        split = {"librdkafka": 0.0, "worker": 0.0}
        for name, fields in self.threads():
            cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
            split["librdkafka" if name.startswith("rdk:") else "worker"] += cpu
        return split

    def thread_usage(self):
        """User and system CPU seconds so far, librdkafka's threads' system seconds, and minor page faults by thread
        kind: where the kernel's share goes (faulting in fetched answers, the sockets' system calls)."""
        usage = {"user": 0.0, "system": 0.0, "librdkafka_system": 0.0, "librdkafka_page_faults": 0,
                 "worker_page_faults": 0}
        for name, fields in self.threads():
            user, system, faults = int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS, int(fields[7])
            usage["user"] += user
            usage["system"] += system
            if name.startswith("rdk:"):
                usage["librdkafka_system"] += system
                usage["librdkafka_page_faults"] += faults
            else:
                usage["worker_page_faults"] += faults
        return usage

    def metrics(self):
        """The worker's /metrics as {name{labels}: value}; empty while it is not listening."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/metrics", timeout=2) as response:
                text = response.read().decode()
        except OSError:
            return {}
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                try:
                    values[name] = float(value)
                except ValueError:
                    pass
        return values

    def total(self, *names, metrics=None):
        """The sum of every series (all labels) of the named metrics (in `metrics` if given, else read now)."""
        m = self.metrics() if metrics is None else metrics
        return sum(v for k, v in m.items() if k.startswith(names))

    def outcomes(self, metrics=None):
        """Accepted plus delivery errors, as this process counts them (in `metrics` if given, else read now)."""
        return self.total("pushworker_notifications_accepted_total", "pushworker_delivery_errors_total", metrics=metrics)

    def writes(self, metrics=None):
        """Notifications written to the gateway by this process so far (resends included); HTTP/2: requests
        answered (in `metrics` if given, else read now)."""
        return self.total("pushworker_notifications_sent_total", "pushworker_http2_responses_total", metrics=metrics)

    def terminate(self, timeout=60):
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def kill(self):
        self.process.kill()
        return self.process.wait(30)


class Poller(threading.Thread):
    """Samples the worker's RSS every `every` seconds (for the soak's RSS series)."""

    def __init__(self, worker, every=10.0):
        super().__init__(daemon=True)
        self.worker, self.every, self.samples, self.stopped = worker, every, [], threading.Event()

    def run(self):
        began = time.time()
        while not self.stopped.wait(self.every):
            try:
                _, _, rss = self.worker.proc()
            except (OSError, IndexError):
                return
            self.samples.append((time.time() - began, rss))


def write_results(path, results):
    """The figures as JSON, when the run was asked for them (`--json`)."""
    if path:
        with open(path, "w") as f:
            json.dump(results, f, indent=2)


def tear_down(workdir, simulator, broker):
    """Stops the simulator (if started) and the broker; removes the run's directory unless BENCH_KEEP is set."""
    if simulator:
        simulator.stop()
    broker.stop()
    if os.environ.get("BENCH_KEEP"):
        print(f"kept {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)


def bench_arguments(description, count, default, flags=None):
    """A start-up benchmark's arguments: the worker's binary, how many of `count` to prepare, where to write the
    figures as JSON, and the benchmark's own `flags` ({"--name": help})."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--binary", required=True)
    parser.add_argument(f"--{count}", type=int, default=default)
    parser.add_argument("--json", help="write the figures here as JSON")
    for flag, text in (flags or {}).items():
        parser.add_argument(flag, action="store_true", help=text)
    return parser.parse_args()
