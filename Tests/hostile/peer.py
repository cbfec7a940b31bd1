"""What the hostile-peer suite shares: raw HTTP/2 frames over TLS (no HTTP/2 library between the attack and the
wire), a meter of a process's CPU and RSS, and a probe that measures PING round trips on a well-behaved
connection while an attack runs (SPEC section 13: other connections are not slowed)."""
import os
import pathlib
import socket
import ssl
import struct
import subprocess
import threading
import time

import hpack

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4
CODES = {0x0: "NO_ERROR", 0x1: "PROTOCOL_ERROR", 0x3: "FLOW_CONTROL_ERROR", 0x4: "SETTINGS_TIMEOUT",
         0x5: "STREAM_CLOSED", 0x6: "FRAME_SIZE_ERROR", 0x7: "REFUSED_STREAM", 0x8: "CANCEL",
         0x9: "COMPRESSION_ERROR", 0xB: "ENHANCE_YOUR_CALM"}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# The limits of SPEC section 13 the suite holds each case to.
MAX_RSS_GROWTH = 16 << 20
MAX_CPU_SECONDS = 1.0
MAX_PING_RTT = 0.100


def frame(kind, flags=0, stream=0, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def settings(*parameters, ack=False):
    return frame(SETTINGS, ACK if ack else 0, 0, b"".join(struct.pack(">HI", p, v) for p, v in parameters))


def ping(data=b"\0" * 8, ack=False):
    return frame(PING, ACK if ack else 0, 0, data)


def goaway(last, code=0):
    return frame(GOAWAY, 0, 0, struct.pack(">II", last, code))


def window_update(stream, increment):
    return frame(WINDOW_UPDATE, 0, stream, struct.pack(">I", increment))


def rst_stream(stream, code=0x8):
    return frame(RST_STREAM, 0, stream, struct.pack(">I", code))


def request_block(encoder, path="/3/device/" + "ab" * 32, topic="com.example.app"):
    return encoder.encode([(":method", "POST"), (":scheme", "https"), (":path", path), (":authority", "localhost"),
                           ("apns-topic", topic)])


def response_block(encoder, status="200"):
    return encoder.encode([(":status", status), ("apns-id", "00000000-0000-4000-8000-000000000000")])


class FrameReader:
    """Frames read from a socket, and the GOAWAY code once one came."""

    def __init__(self):
        self.buffer = b""
        self.goaway_code = None
        self.frames = []

    def feed(self, data):
        self.buffer += data
        while len(self.buffer) >= 9:
            length = int.from_bytes(self.buffer[:3], "big")
            if len(self.buffer) < 9 + length:
                break
            kind, flags = self.buffer[3], self.buffer[4]
            stream = int.from_bytes(self.buffer[5:9], "big") & 0x7FFFFFFF
            payload = self.buffer[9:9 + length]
            self.buffer = self.buffer[9 + length:]
            if kind == GOAWAY and len(payload) >= 8:
                self.goaway_code = CODES.get(int.from_bytes(payload[4:8], "big"), hex(int.from_bytes(payload[4:8], "big")))
            self.frames.append((kind, flags, stream, payload))


def read_until_closed(sock, reader, timeout):
    """Reads until the peer closes (or `timeout` seconds pass): returns whether it closed."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        sock.settimeout(max(0.01, end - time.monotonic()))
        try:
            data = sock.recv(65536)
        except (socket.timeout, TimeoutError):
            return False
        except (ConnectionError, ssl.SSLError, OSError):
            return True
        if not data:
            return True
        reader.feed(data)
    return False


def send_quietly(sock, data):
    """Sends what it can: a peer that ends the connection mid-attack is the outcome, not an error here."""
    try:
        sock.sendall(data)
        return True
    except (ConnectionError, ssl.SSLError, OSError):
        return False


class Meter:
    """A process's CPU seconds and resident memory, from /proc."""

    def __init__(self, pid):
        self.pid = pid

    def cpu(self):
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def rss(self):
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0


class Probe(threading.Thread):
    """Measures round trips of something well-behaved (`round_trip()`, returns seconds) every 150 ms until stopped
    (a PING a round trip: faster would pass SPEC section 13's 200 control frames per 30 s itself); `worst` is the
    slowest."""

    def __init__(self, round_trip):
        super().__init__(daemon=True)
        self.round_trip = round_trip
        self.stopping = threading.Event()
        self.samples = []
        self.failures = 0
        self.first_failure = None

    def run(self):
        while not self.stopping.is_set():
            try:
                self.samples.append(self.round_trip())
            except Exception as error:  # noqa: BLE001 - a failed probe is counted, and fails the case
                self.failures += 1
                self.first_failure = self.first_failure or repr(error)
            self.stopping.wait(0.15)

    def stop(self):
        self.stopping.set()
        self.join(10)

    @property
    def worst(self):
        return max(self.samples) if self.samples else None


def pki():
    out = subprocess.run(["bash", str(ROOT / "scripts" / "gen-pki")], check=True, capture_output=True, text=True)
    return pathlib.Path(out.stdout.strip().splitlines()[-1])


def binary():
    path = os.environ.get("PUSHWORKER_BIN")
    if path:
        return path
    out = subprocess.run([str(ROOT / "scripts" / "e2e" / "prepare")], check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


class Case:
    """One attack measured: the process's CPU and RSS around it, and a probe running through it."""

    def __init__(self, meter, probe_round_trip):
        self.meter = meter
        self.probe = Probe(probe_round_trip)

    def __enter__(self):
        self.cpu, self.rss = self.meter.cpu(), self.meter.rss()
        self.probe.start()
        return self

    def __exit__(self, *exc):
        self.probe.stop()
        self.cpu_used = self.meter.cpu() - self.cpu
        self.rss_growth = self.meter.rss() - self.rss
        return False

    def check(self, name):
        assert self.cpu_used < MAX_CPU_SECONDS, f"{name}: {self.cpu_used:.2f} s of CPU"
        assert self.rss_growth <= MAX_RSS_GROWTH, f"{name}: RSS grew by {self.rss_growth >> 20} MiB"
        assert self.probe.failures == 0, f"{name}: {self.probe.failures} probes failed, first: {self.probe.first_failure}"
        assert self.probe.samples, f"{name}: no probe completed"
        assert self.probe.worst < MAX_PING_RTT, f"{name}: the other connection waited {self.probe.worst * 1000:.0f} ms"
