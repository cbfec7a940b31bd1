"""A hostile client against `pushworker simulate`'s HTTP/2 API (SPEC section 13): one case per attack, raw frames
over TLS. Each case checks how the attacked connection ends (its GOAWAY code, or that it is still served), that the
simulator's RSS grows by at most 16 MiB and its CPU for the case stays under 1 s, and that a second, well-behaved
connection's PING round trips stay under 100 ms throughout."""
import json
import signal
import socket
import ssl
import subprocess
import time

import hpack
import pytest

import peer
from peer import CONTINUATION, DATA, END_HEADERS, END_STREAM, HEADERS, PREFACE, PRIORITY, RST_STREAM, frame

STREAM_LIMIT = 100


@pytest.fixture(scope="module")
def pki():
    return peer.pki()


@pytest.fixture(scope="module")
def simulator(pki):
    process = subprocess.Popen(
        [peer.binary(), "simulate", "--cert", str(pki / "server.pem"), "--key", str(pki / "server-key.pem"),
         "--ca", str(pki / "ca.pem"), "--gateway-port", "0", "--feedback-port", "0", "--api-port", "0",
         "--max-concurrent-streams", str(STREAM_LIMIT), "--log-level", "error"],
        stdout=subprocess.PIPE, text=True)
    ready = json.loads(process.stdout.readline())
    yield process, int(ready["api"].rsplit(":", 1)[1])
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=30)


def connect(port, pki):
    context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    context.set_alpn_protocols(["h2"])
    context.load_cert_chain(str(pki / "app.pem"), str(pki / "app-key.pem"))
    sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname="localhost")
    assert sock.selected_alpn_protocol() == "h2"
    return sock


class WellBehaved:
    """A client that does everything right: its PING round trips are the probe."""

    def __init__(self, port, pki):
        self.sock = connect(port, pki)
        self.sock.sendall(PREFACE + peer.settings() + peer.settings(ack=True))
        self.reader = peer.FrameReader()
        self.count = 0

    def round_trip(self):
        self.count += 1
        data = self.count.to_bytes(8, "big")
        started = time.monotonic()
        self.sock.sendall(peer.ping(data))
        while True:
            for kind, flags, _, payload in self.reader.frames:
                if kind == peer.PING and flags & peer.ACK and payload == data:
                    self.reader.frames.clear()
                    return time.monotonic() - started
            self.reader.frames.clear()
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the well-behaved connection was closed")
            self.reader.feed(chunk)


def opened(port, pki, acknowledged=True):
    """An attacking connection past the preface (its SETTINGS, and the acknowledgement of the server's unless not)."""
    sock = connect(port, pki)
    sock.sendall(PREFACE + peer.settings() + (peer.settings(ack=True) if acknowledged else b""))
    return sock


# Each attack: (name, what it sends, the GOAWAY code it must end with, or None: the connection is still served).

def unknown_frames_never_on_a_boundary(sock):
    # 32 MiB of frames of an unknown type, in writes that end mid-frame: ignored, and not kept.
    stream = frame(0xFA, 0, 0, b"\0" * 16384) * 64  # 1 MiB, sent 32 times in writes of 4,001 bytes
    for _ in range(32):
        for start in range(0, len(stream), 4001):
            if not peer.send_quietly(sock, stream[start:start + 4001]):
                return


def settings_of_2730_parameters(sock):
    peer.send_quietly(sock, peer.settings(*[(0x4, 65535)] * 2730))


def settings_flood_never_reading(sock):
    peer.send_quietly(sock, peer.settings() * 5000)


def ping_flood_never_reading(sock):
    peer.send_quietly(sock, peer.ping() * 100_000)


def rapid_reset(sock):
    encoder = hpack.Encoder()
    frames = b"".join(frame(HEADERS, END_HEADERS, s, peer.request_block(encoder)) + peer.rst_stream(s)
                      for s in range(1, 2001, 2))
    peer.send_quietly(sock, frames)


def continuation_flood(sock):
    block = peer.request_block(hpack.Encoder())
    peer.send_quietly(sock, frame(HEADERS, 0, 1, block[:3]) + frame(CONTINUATION, 0, 1) * 100_000)


def hpack_bomb(sock):
    # One 4,000-byte value into the dynamic table, then referenced 12,000 times in one block: 48 MB of headers.
    value = b"v" * 4000
    block = peer.request_block(hpack.Encoder()) + b"\x40\x06x-bomb\x7f" + bytes([(4000 - 127) & 0x7F | 0x80, (4000 - 127) >> 7]) + value
    block += b"\xbe" * 12_000
    peer.send_quietly(sock, frame(HEADERS, END_HEADERS | END_STREAM, 1, block))


def dynamic_table_over_its_size(sock):
    # A table size update to 1,000,000 (the server allows 4,096).
    size = 1_000_000 - 31
    update = bytes([0x3F]) + bytes(((size >> (7 * i)) & 0x7F) | (0x80 if size >> (7 * (i + 1)) else 0) for i in range(3))
    peer.send_quietly(sock, frame(HEADERS, END_HEADERS | END_STREAM, 1, update + peer.request_block(hpack.Encoder())))


def window_overflow(sock):
    peer.send_quietly(sock, peer.window_update(0, 0x7FFFFFFF))


def empty_data_flood(sock):
    block = peer.request_block(hpack.Encoder())
    peer.send_quietly(sock, frame(HEADERS, END_HEADERS, 1, block) + frame(DATA, 0, 1) * 10_000)


def priority_flood(sock):
    peer.send_quietly(sock, b"".join(frame(PRIORITY, 0, s, b"\0\0\0\0\x10") for s in range(1, 2001, 2)))


def stream_id_reuse(sock):
    encoder = hpack.Encoder()
    request = frame(HEADERS, END_HEADERS, 1, peer.request_block(encoder)) + frame(DATA, END_STREAM, 1, b'{"aps":{}}')
    peer.send_quietly(sock, request)
    # Once the first request is answered and its stream closed, the attack is the same id again.
    reader = peer.FrameReader()
    while not any(kind == HEADERS and stream == 1 for kind, _, stream, _ in reader.frames):
        reader.feed(sock.recv(65536))
    peer.send_quietly(sock, frame(HEADERS, END_HEADERS | END_STREAM, 1, peer.request_block(encoder)))


def never_opens_the_window(sock):
    # Initial windows of 0 and no WINDOW_UPDATE ever: 500 requests whose answers carry a body (a topic the
    # certificate does not allow), 400 of them over the stream limit. Answers wait; nothing grows.
    peer.send_quietly(sock, peer.settings((0x4, 0)))
    encoder = hpack.Encoder()
    for s in range(1, 1001, 2):
        block = peer.request_block(encoder, topic="com.example.other")
        if not peer.send_quietly(sock, frame(HEADERS, END_HEADERS, s, block) + frame(DATA, END_STREAM, s, b'{"aps":{}}')):
            return


ATTACKS = [
    (unknown_frames_never_on_a_boundary, None),
    (settings_of_2730_parameters, "ENHANCE_YOUR_CALM"),
    (settings_flood_never_reading, "ENHANCE_YOUR_CALM"),
    (ping_flood_never_reading, "ENHANCE_YOUR_CALM"),
    (rapid_reset, "ENHANCE_YOUR_CALM"),
    (continuation_flood, "ENHANCE_YOUR_CALM"),
    (hpack_bomb, "COMPRESSION_ERROR"),
    (dynamic_table_over_its_size, "COMPRESSION_ERROR"),
    (window_overflow, "FLOW_CONTROL_ERROR"),
    (empty_data_flood, "ENHANCE_YOUR_CALM"),
    (priority_flood, "ENHANCE_YOUR_CALM"),
    (stream_id_reuse, "STREAM_CLOSED"),
    (never_opens_the_window, None),
]


@pytest.mark.parametrize("attack, expected", ATTACKS, ids=[a.__name__ for a, _ in ATTACKS])
def test_an_attack_ends_as_it_must_and_costs_little(simulator, pki, attack, expected):
    process, port = simulator
    probe = WellBehaved(port, pki)
    sock = opened(port, pki)
    reader = peer.FrameReader()
    with peer.Case(peer.Meter(process.pid), probe.round_trip) as case:
        attack(sock)
        closed = peer.read_until_closed(sock, reader, timeout=5 if expected else 1)
    sock.close()
    probe.sock.close()
    if expected:
        assert closed, f"{attack.__name__}: the connection was not ended"
        assert reader.goaway_code == expected, f"{attack.__name__}: GOAWAY {reader.goaway_code}"
    else:
        assert not closed, f"{attack.__name__}: the connection was ended (GOAWAY {reader.goaway_code})"
    case.check(attack.__name__)


def test_a_client_that_never_acknowledges_gets_the_advertised_limit_then_a_settings_timeout(simulator, pki):
    """300 streams opened before acknowledging the SETTINGS: those past the advertised 100 are refused from the
    first; with no acknowledgement for 10 s, GOAWAY SETTINGS_TIMEOUT."""
    process, port = simulator
    probe = WellBehaved(port, pki)
    sock = opened(port, pki, acknowledged=False)
    encoder = hpack.Encoder()
    reader = peer.FrameReader()
    with peer.Case(peer.Meter(process.pid), probe.round_trip) as case:
        sock.sendall(b"".join(frame(HEADERS, END_HEADERS, s, peer.request_block(encoder)) for s in range(1, 601, 2)))
        closed = peer.read_until_closed(sock, reader, timeout=13)
    sock.close()
    probe.sock.close()
    refused = [f for f in reader.frames if f[0] == RST_STREAM and f[3] == b"\0\0\0\x07"]
    assert len(refused) == 300 - STREAM_LIMIT
    assert closed and reader.goaway_code == "SETTINGS_TIMEOUT"
    case.check("no SETTINGS acknowledgement")
