"""A hostile server in front of `pushworker run` (SPEC section 13): the worker's HTTP/2 client faces a provider API
that attacks it, one case per attack, with raw frames over TLS. Each case checks how the worker ends the connection
(its GOAWAY code) or what becomes of the notifications, that its RSS grows by at most 16 MiB and its CPU for the
case stays under 1 s, and that its /healthz keeps answering within 100 ms throughout. The broker is the test broker
(scripts/kafka-broker); between cases the server behaves and the worker delivers what waited."""
import socket
import ssl
import sys
import threading
import time
import urllib.request

import hpack
import pytest
from confluent_kafka import Producer

import peer
from peer import CONTINUATION, END_HEADERS, END_STREAM, HEADERS, PREFACE, frame

sys.path.insert(0, str(peer.ROOT / "scripts" / "e2e"))
import harness  # noqa: E402


class HostileServer:
    """A TLS server (the test PKI's server certificate, ALPN h2) whose connections run a behaviour: a function of
    (connection) that answers the worker. `attack(behaviour)` gives it to the next connection only (the ones after
    behave), so that a case meets its attack once. It records the GOAWAY codes the worker sent and how many requests
    came."""

    def __init__(self, pki):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(str(pki / "server.pem"), str(pki / "server-key.pem"))
        self.context.set_alpn_protocols(["h2"])
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.behaviour = well_behaved
        self.lock = threading.Lock()
        self.goaways = []
        self.requests = 0
        self.live = set()
        threading.Thread(target=self.accept, daemon=True).start()

    def attack(self, behaviour):
        with self.lock:
            self.behaviour = behaviour

    def cut(self):
        """Closes every open connection: the worker's next connection meets the current behaviour."""
        with self.lock:
            live = list(self.live)
        for sock in live:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def accept(self):
        while True:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                behaviour, self.behaviour = self.behaviour, well_behaved
            threading.Thread(target=self.serve, args=(raw, behaviour), daemon=True).start()

    def serve(self, raw, behaviour):
        try:
            sock = self.context.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            raw.close()
            return
        connection = Connection(self, sock)
        with self.lock:
            self.live.add(sock)
        try:
            behaviour(connection)
        except (ConnectionError, ssl.SSLError, OSError, StopIteration):
            pass
        finally:
            with self.lock:
                self.live.discard(sock)
                if connection.reader.goaway_code:
                    self.goaways.append(connection.reader.goaway_code)
            sock.close()

    def goaway_count(self, code):
        with self.lock:
            return self.goaways.count(code)


class Connection:
    """One accepted connection: the worker's frames as they come, and helpers to answer."""

    def __init__(self, server, sock):
        self.server = server
        self.sock = sock
        self.reader = peer.FrameReader()
        self.encoder = hpack.Encoder()
        self.preface_read = False

    def next_frame(self):
        """The worker's next frame (after its preface); raises ConnectionError once it closes."""
        while True:
            if not self.preface_read and len(self.reader.buffer) >= len(PREFACE):
                assert self.reader.buffer.startswith(PREFACE)
                self.reader.buffer = self.reader.buffer[len(PREFACE):]
                self.preface_read = True
            if self.preface_read:
                self.reader.feed(b"")
                if self.reader.frames:
                    return self.reader.frames.pop(0)
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed")
            if self.preface_read:
                self.reader.feed(data)
            else:
                self.reader.buffer += data

    def open(self, acknowledge=True):
        """The server's preface: SETTINGS (100 streams), and the acknowledgement of the worker's."""
        self.sock.sendall(peer.settings((0x3, 100)) + (peer.settings(ack=True) if acknowledge else b""))

    def requests(self):
        """Yields each request's stream as its END_STREAM arrives; answers PINGs on the way."""
        while True:
            kind, flags, stream, payload = self.next_frame()
            if kind == peer.PING and not flags & peer.ACK:
                self.sock.sendall(peer.ping(payload, ack=True))
            elif kind in (HEADERS, peer.DATA) and flags & END_STREAM:
                with self.server.lock:
                    self.server.requests += 1
                yield stream

    def answer(self, stream, status="200"):
        self.sock.sendall(frame(HEADERS, END_HEADERS | END_STREAM, stream, peer.response_block(self.encoder, status)))

    def drain(self, seconds=10):
        """Reads what the worker still sends until it closes (recording its GOAWAY)."""
        peer.read_until_closed(self.sock, self.reader, seconds)


def well_behaved(c):
    c.open()
    for stream in c.requests():
        c.answer(stream)


def refuses_every_stream(c):
    c.open()
    for stream in c.requests():
        c.sock.sendall(peer.rst_stream(stream, 0x7))


def settings_of_2730_parameters(c):
    c.open()
    next(c.requests())
    peer.send_quietly(c.sock, peer.settings(*[(0x4, 65535)] * 2730))
    c.drain()


def unknown_frames_never_on_a_boundary(c):
    c.open()
    stream = frame(0xFA, 0, 0, b"\0" * 16384) * 64
    for _ in range(32):
        for start in range(0, len(stream), 4001):
            c.sock.sendall(stream[start:start + 4001])
    well_behaved_after_open(c)


def well_behaved_after_open(c):
    for stream in c.requests():
        c.answer(stream)


def continuation_flood(c):
    c.open()
    stream = next(c.requests())
    block = peer.response_block(c.encoder)
    peer.send_quietly(c.sock, frame(HEADERS, 0, stream, block[:1]) + frame(CONTINUATION, 0, stream) * 100_000)
    c.drain()


def ping_flood(c):
    c.open()
    peer.send_quietly(c.sock, peer.ping() * 100_000)
    c.drain()


def goaway_storm(c):
    # Requests held open, then GOAWAY after GOAWAY that changes nothing.
    c.open()
    next(c.requests())
    peer.send_quietly(c.sock, peer.goaway(0x7FFFFFFF) * 10_000)
    c.drain()


def growing_goaway(c):
    # The first names the open request's stream (it stays open), the second a higher one.
    c.open()
    stream = next(c.requests())
    peer.send_quietly(c.sock, peer.goaway(stream) + peer.goaway(0x7FFFFFFF))
    c.drain()


def window_overflow(c):
    c.open()
    peer.send_quietly(c.sock, peer.window_update(0, 0x7FFFFFFF))
    c.drain()


def informational_response_that_ends_the_stream(c):
    c.open()
    first = True
    for stream in c.requests():
        c.answer(stream, "103" if first else "200")
        first = False


def answers_nothing(c):
    c.drain(seconds=15)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("hostile-worker"))
    pki = peer.pki()
    broker = harness.Broker(workdir)
    broker.start()
    broker.create_topics(partitions=1)
    server = HostileServer(pki)
    http_port = harness.free_port()
    config = harness.worker_config(workdir, broker.servers, 0, 0, http_port, connections=1, reconnect=(50, 500, 30),
                                   api_port=server.port)
    worker = harness.Worker(peer.binary(), config, workdir, http_port)
    producer = Producer({"bootstrap.servers": broker.servers, "acks": "all", "log_level": 3})
    world = World(broker, server, worker, producer)
    del producer
    assert world.wait(lambda: bool(worker.metrics()), 60), "the worker's /metrics never answered"
    yield world
    worker.terminate()
    world.producer = None  # gone before its broker, so it does not log the broker down
    broker.stop()


class World:
    def __init__(self, broker, server, worker, producer):
        self.broker, self.server, self.worker, self.producer = broker, server, worker, producer
        self.produced = 0

    def produce(self, count):
        ts = int(time.time() * 1000)
        for _ in range(count):
            self.producer.produce(harness.INPUT, harness.event(self.produced, 100, ts), key=harness.record_key(self.produced),
                                  timestamp=ts)
            self.produced += 1
        assert self.producer.flush(30) == 0

    def outcomes(self):
        return self.worker.outcomes()

    def connection_errors(self, code):
        """The worker's pushworker_http2_connection_errors_total for `code`."""
        return sum(v for k, v in self.worker.metrics().items()
                   if k.startswith("pushworker_http2_connection_errors_total{") and f'code="{code}"' in k)

    @staticmethod
    def wait(condition, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if condition():
                return True
            time.sleep(0.05)
        return False

    def healthz(self):
        started = time.monotonic()
        with urllib.request.urlopen(f"http://127.0.0.1:{self.worker.http_port}/healthz", timeout=2) as response:
            response.read()
        return time.monotonic() - started


ATTACKS = [
    (settings_of_2730_parameters, "ENHANCE_YOUR_CALM"),
    (ping_flood, "ENHANCE_YOUR_CALM"),
    (continuation_flood, "ENHANCE_YOUR_CALM"),
    (goaway_storm, "ENHANCE_YOUR_CALM"),
    (growing_goaway, "PROTOCOL_ERROR"),
    (window_overflow, "FLOW_CONTROL_ERROR"),
    (answers_nothing, "SETTINGS_TIMEOUT"),
]


def settle(world):
    """Every event produced so far gets its outcome (the server behaves after each attack)."""
    assert world.wait(lambda: world.outcomes() >= world.produced, 60), f"{world.outcomes()} of {world.produced} outcomes"


def attack_with(world, behaviour):
    """Every event so far settled, the worker's next connection meets `behaviour`."""
    settle(world)
    world.server.attack(behaviour)
    world.server.cut()


@pytest.mark.parametrize("attack, expected", ATTACKS, ids=[a.__name__ for a, _ in ATTACKS])
def test_the_worker_ends_an_attacking_connection_and_loses_nothing(world, attack, expected):
    """The worker's count of the connections it ended, by code, moves; the GOAWAY it sent is read by the server
    when it gets there (a flood the worker leaves unread can make its close a reset that overtakes the GOAWAY)."""
    attack_with(world, attack)
    before = world.connection_errors(expected)
    with peer.Case(peer.Meter(world.worker.process.pid), world.healthz) as case:
        world.produce(1)
        assert world.wait(lambda: world.connection_errors(expected) > before, 30), \
            f"{attack.__name__}: no connection error {expected} counted (GOAWAYs the server read: {world.server.goaways})"
    case.check(attack.__name__)
    settle(world)


def test_input_that_never_ends_on_a_frame_boundary_is_not_kept(world):
    attack_with(world, unknown_frames_never_on_a_boundary)
    requests = world.server.requests
    with peer.Case(peer.Meter(world.worker.process.pid), world.healthz) as case:
        world.produce(1)
        assert world.wait(lambda: world.server.requests > requests, 30)
    case.check("unknown frames never on a boundary")


def test_a_server_that_refuses_every_stream_ends_each_notification(world):
    """REFUSED_STREAM on every request: 3 resends uncounted, then counted ones until max_attempts (5): each
    notification ends as retries_exhausted after 8 requests, not resent forever."""
    attack_with(world, refuses_every_stream)
    errors = world.worker.total("pushworker_delivery_errors_total")
    requests = world.server.requests
    with peer.Case(peer.Meter(world.worker.process.pid), world.healthz) as case:
        world.produce(3)
        assert world.wait(lambda: world.worker.total("pushworker_delivery_errors_total") >= errors + 3, 30)
    case.check("refuses every stream")
    metrics = world.worker.metrics()
    assert world.worker.total("pushworker_delivery_errors_total", metrics=metrics) == errors + 3
    assert any("retries_exhausted" in k for k in metrics if k.startswith("pushworker_delivery_errors_total")), metrics
    assert world.server.requests - requests == 3 * 8


def test_an_informational_response_that_ends_its_stream_is_resent(world):
    """A 103 with END_STREAM is a stream error: the request goes again at once (counted) and is accepted."""
    attack_with(world, informational_response_that_ends_the_stream)
    accepted = world.worker.total("pushworker_notifications_accepted_total")
    requests = world.server.requests
    world.produce(1)
    assert world.wait(lambda: world.worker.total("pushworker_notifications_accepted_total") == accepted + 1, 30)
    assert world.server.requests - requests == 2
