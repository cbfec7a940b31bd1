"""A third, independent client: h2load (nghttp2's load generator, Debian's nghttp2-client) drives the simulator's
HTTP/2 API over TLS with provider-token authentication (`pushworker provider-token` makes the header; h2load has no
client certificates), one stream on each of 8 connections. Every request must succeed, and the count h2load
reports must equal what the simulator recorded and counted."""
import json
import re
import shutil
import signal
import subprocess

import pytest

import peer

REQUESTS = 100_000
# One stream a connection: a token connection advertises one stream until a request succeeds, and the simulator
# refuses streams past the advertised limit from the first (SPEC section 13), while h2load opens its -m streams
# before it reads the SETTINGS and does not retry a refused one.
CONNECTIONS = 8
TOKEN = "740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad"


@pytest.mark.skipif(shutil.which("h2load") is None, reason="h2load is installed by scripts/setup (nghttp2-client)")
def test_h2load_requests_are_all_answered_and_recorded(tmp_path):
    pki = peer.pki()
    binary = peer.binary()
    record = tmp_path / "record.jsonl"
    simulator = subprocess.Popen(
        [binary, "simulate", "--cert", str(pki / "server.pem"), "--key", str(pki / "server-key.pem"),
         "--ca", str(pki / "ca.pem"), "--gateway-port", "0", "--feedback-port", "0", "--api-port", "0",
         "--token-key", str(pki / "token-key.pub.pem"), "--team-id", "TEAM123456", "--key-id", "KEY1234567",
         "--max-concurrent-streams", "200", "--record", str(record), "--log-level", "error"],
        stdout=subprocess.PIPE, text=True)
    try:
        api = json.loads(simulator.stdout.readline())["api"]
        token = subprocess.run(
            [binary, "provider-token", "--signing-key", str(pki / "AuthKey_KEY1234567.p8"), "--team-id", "TEAM123456",
             "--key-id", "KEY1234567"], check=True, capture_output=True, text=True).stdout.strip()
        body = tmp_path / "body.json"
        body.write_text('{"aps":{"alert":{"title":"Your order has shipped","body":"Order #48213 is on its way"}}}')
        load = subprocess.run(
            ["h2load", "-n", str(REQUESTS), "-c", str(CONNECTIONS), "-m", "1", "-t", "1", "-d", str(body),
             "-H", f"authorization: bearer {token}", "-H", "apns-topic: com.example.app", "-H", "apns-push-type: alert",
             "-H", "apns-priority: 10", "-H", "apns-expiration: 0", f"https://{api}/3/device/{TOKEN}"],
            capture_output=True, text=True, timeout=240)
    finally:
        simulator.send_signal(signal.SIGTERM)
        out, _ = simulator.communicate(timeout=60)
    report = load.stdout
    assert load.returncode == 0, report + load.stderr
    requests = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, "
                         r"(\d+) timeout", report)
    assert requests, report
    total, _, done, succeeded, failed, errored, timeout = map(int, requests.groups())
    assert (total, done, succeeded, failed, errored, timeout) == (REQUESTS, REQUESTS, REQUESTS, 0, 0, 0), report
    assert re.search(rf"status codes: {REQUESTS} 2xx, 0 3xx, 0 4xx, 0 5xx", report), report
    summary = json.loads([line for line in out.splitlines() if line.startswith('{"summary"')][-1])["summary"]
    assert summary["api_answers"] == {"200": REQUESTS}
    assert summary["api_connections"] == CONNECTIONS
    with open(record) as f:
        recorded = sum(1 for _ in f)
    assert recorded == succeeded
