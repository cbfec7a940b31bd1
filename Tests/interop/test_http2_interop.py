"""The HTTP/2 provider API against independent implementations: `pushworker encode --format http2` agrees with the
Python reference encoder, provider tokens of `pushworker provider-token` verify with the `cryptography` package, and
the simulator (`pushworker simulate --api-port`) answers a Python HTTP/2 client (the `h2` package) like Apple."""
import base64
import json
import os
import pathlib
import socket
import ssl
import subprocess
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
BIN = os.environ.get("PUSHWORKER_BIN", str(ROOT / ".build" / "debug" / "pushworker"))
NOW = 1_800_000_000
TEAM, KID = "TEAM123456", "KEY1234567"
TOKEN = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
INVALID = "ff" * 32
GONE = "ee" * 32


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8", **kw)


@pytest.fixture(scope="module")
def pki():
    out = run(["bash", str(ROOT / "scripts" / "gen-pki")], check=True)
    return pathlib.Path(out.stdout.strip().splitlines()[-1])


# ---- encode and validate -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def events(tmp_path_factory):
    path = tmp_path_factory.mktemp("interop-http2") / "events.jsonl"
    with open(path, "wb") as out:
        for seed in (11, 12, 13):
            subprocess.run([sys.executable, str(HERE / "gen_events.py"), str(seed), "700", "http2"], stdout=out, check=True)
    return path


def split_line(line):
    if line.startswith('"'):
        value, end = json.JSONDecoder().raw_decode(line)
        return value, line[end + 1:]
    head, _, rest = line.partition(" ")
    return head, rest


@pytest.mark.parametrize("topic", [None, "com.apple.mgmt.External.1234"])
def test_encode_http2_matches_reference(events, topic):
    args = ["--format", "http2", "--now", str(NOW)] + (["--topic", topic] if topic else [])
    ours = run([BIN, "encode", str(events), *args])
    assert ours.returncode in (0, 1), ours.stderr
    theirs = run([sys.executable, str(HERE / "reference_encoder.py"), str(events), *args], check=True)
    ours_lines, their_lines = ours.stdout.splitlines(), theirs.stdout.splitlines()
    assert len(ours_lines) == len(their_lines) == 2100
    requests = 0
    for number, (a, b) in enumerate(zip(ours_lines, their_lines), 1):
        (id_a, rest_a), (id_b, rest_b) = split_line(a), split_line(b)
        assert id_a == id_b, (number, a, b)
        if rest_a.startswith("error:") or rest_b.startswith("error:"):
            assert rest_a == rest_b, (number, a, b)
            continue
        # same members in the same order; header values and body exactly
        assert json.loads(rest_a, object_pairs_hook=list) == json.loads(rest_b, object_pairs_hook=list), (number, a, b)
        requests += 1
    errors = {line.split(" error:")[1] for line in ours_lines if " error:" in line}
    assert {"malformed_event", "invalid_priority", "payload_too_large", "expired"} <= errors
    assert ("rejected" in errors) == (topic is None)  # mdm without the app's topic
    assert requests > 1000
    pushed = [json.loads(split_line(line)[1]) for line in ours_lines if " error:" not in line]
    types = {r["headers"]["apns-push-type"] for r in pushed}
    assert {"alert", "background", "voip", "liveactivity"} <= types
    assert any(r["headers"]["apns-priority"] == "1" for r in pushed)
    assert any("apns-collapse-id" in r["headers"] for r in pushed)
    assert any(len(r["body"].encode()) > 4096 for r in pushed if r["headers"]["apns-push-type"] == "voip")


def test_validate_http2_agrees_with_encode(events):
    encoded = run([BIN, "encode", str(events), "--format", "http2", "--now", str(NOW), "--topic", "t"]).stdout.splitlines()
    verdicts = [json.loads(line) for line in
                run([BIN, "validate", str(events), "--format", "http2", "--now", str(NOW)]).stdout.splitlines()]
    assert len(verdicts) == len(encoded)
    for verdict, line in zip(verdicts, encoded):
        reason = line.split(" error:")[1] if " error:" in line else None
        assert verdict["valid"] is (reason is None), (verdict, line)
        if reason:
            assert verdict["reason"] == reason, (verdict, line)


# ---- provider tokens ------------------------------------------------------------------------------------------------

def b64url_decode(part):
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_provider_token_verifies_independently(pki):
    out = run([BIN, "provider-token", "--signing-key", str(pki / "AuthKey_KEY1234567.p8"), "--team-id", TEAM,
               "--key-id", KID, "--issued-at", "1795000000"], check=True)
    token = out.stdout.strip()
    header, claims, signature = token.split(".")
    assert "=" not in token
    assert json.loads(b64url_decode(header)) == {"alg": "ES256", "kid": KID}
    assert json.loads(b64url_decode(claims)) == {"iss": TEAM, "iat": 1795000000}
    raw = b64url_decode(signature)
    assert len(raw) == 64  # r‖s, not DER
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    public = serialization.load_pem_public_key((pki / "token-key.pub.pem").read_bytes())
    public.verify(der, f"{header}.{claims}".encode(), ec.ECDSA(hashes.SHA256()))  # raises when wrong
    other = serialization.load_pem_private_key((pki / "other-token-key.p8").read_bytes(), None).public_key()
    with pytest.raises(Exception):
        other.verify(der, f"{header}.{claims}".encode(), ec.ECDSA(hashes.SHA256()))


def python_token(key_path, iat, kid=KID, team=TEAM):
    """A provider token made by this test alone (cryptography signs, DER turned into r‖s)."""
    key = serialization.load_pem_private_key(pathlib.Path(key_path).read_bytes(), None)
    signing_input = b64url(json.dumps({"alg": "ES256", "kid": kid}).encode()) + "." + \
        b64url(json.dumps({"iss": team, "iat": iat}).encode())
    r, s = decode_dss_signature(key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
    return signing_input + "." + b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big"))


# ---- the simulator, from an h2 client ------------------------------------------------------------------------------

class Client:
    """A minimal HTTP/2 client over TLS with ALPN h2 (the h2 package's state machine, our socket loop)."""

    def __init__(self, port, pki, cert=None):
        context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
        context.set_alpn_protocols(["h2"])
        if cert:
            context.load_cert_chain(str(pki / f"{cert}.pem"), str(pki / f"{cert}-key.pem"))
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock = context.wrap_socket(raw, server_hostname="localhost")
        assert self.sock.selected_alpn_protocol() == "h2"
        self.conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.sock.sendall(self.conn.data_to_send())
        self.responses = {}
        self.goaway = None
        self.closed = False
        self.settings_seen = 0
        while self.settings_seen == 0:
            self._pump()

    def _pump(self):
        data = self.sock.recv(65536)
        if not data:
            self.closed = True
            return
        for event in self.conn.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived):
                self.responses.setdefault(event.stream_id, {"body": b""})["headers"] = dict(
                    (k.decode(), v.decode()) for k, v in event.headers)
            elif isinstance(event, h2.events.DataReceived):
                self.responses.setdefault(event.stream_id, {"body": b""})["body"] += event.data
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self.responses[event.stream_id]["done"] = True
            elif isinstance(event, h2.events.RemoteSettingsChanged):
                self.settings_seen += 1
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.goaway = event
        out = self.conn.data_to_send()
        if out:
            self.sock.sendall(out)

    def send(self, path, headers, body=b"", method="POST"):
        stream = self.conn.get_next_available_stream_id()
        fields = [(":method", method), (":scheme", "https"), (":path", path), (":authority", "localhost")] + headers
        self.conn.send_headers(stream, fields, end_stream=not body)
        if body:
            self.conn.send_data(stream, body, end_stream=True)
        self.sock.sendall(self.conn.data_to_send())
        return stream

    def wait(self, stream):
        while not self.responses.get(stream, {}).get("done"):
            if self.closed:
                return None
            self._pump()
        response = self.responses[stream]
        body = json.loads(response["body"]) if response["body"] else None
        return int(response["headers"][":status"]), response["headers"], body

    def request(self, path, headers, body=b"", method="POST"):
        return self.wait(self.send(path, headers, body, method))

    @property
    def stream_limit(self):
        return self.conn.remote_settings.max_concurrent_streams

    def close(self):
        self.sock.close()


@pytest.fixture()
def simulator(pki, tmp_path):
    procs = []

    def start(*extra):
        (tmp_path / "invalid.txt").write_text(INVALID + "\n")
        (tmp_path / "unregistered.txt").write_text(f"{GONE} 1795000000123\n")
        proc = subprocess.Popen(
            [BIN, "simulate", "--cert", str(pki / "server.pem"), "--key", str(pki / "server-key.pem"),
             "--ca", str(pki / "ca.pem"), "--gateway-port", "0", "--feedback-port", "0", "--api-port", "0",
             "--invalid-tokens", str(tmp_path / "invalid.txt"), "--unregistered", str(tmp_path / "unregistered.txt"),
             "--record", str(tmp_path / "record.jsonl"), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        ready = json.loads(proc.stdout.readline())
        return int(ready["api"].rsplit(":", 1)[1]), proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)


def summary(proc):
    proc.terminate()
    out, _ = proc.communicate(timeout=10)
    return json.loads(out.strip().splitlines()[-1])["summary"]


def alert(topic="com.example.app", push_type="alert", priority="10", extra=()):
    return [("apns-topic", topic), ("apns-push-type", push_type), ("apns-priority", priority),
            ("apns-expiration", "0"), *extra]


BODY = b'{"aps":{"alert":"hello"}}'


def test_token_connections_answer_like_apple(simulator, pki, tmp_path):
    port, proc = simulator("--token-key", str(pki / "token-key.pub.pem"), "--team-id", TEAM, "--key-id", KID,
                           "--max-concurrent-streams", "7")
    now = int(time.time())
    token = python_token(pki / "AuthKey_KEY1234567.p8", now)
    auth = [("authorization", f"bearer {token}")]
    client = Client(port, pki)
    assert client.stream_limit == 1  # one stream until a request succeeds
    status, headers, body = client.request(f"/3/device/{TOKEN}", alert(extra=auth + [("apns-id", "123E4567-E89B-12D3-A456-426614174000")]), BODY)
    assert (status, body) == (200, None)
    assert headers["apns-id"] == "123E4567-E89B-12D3-A456-426614174000"
    while client.stream_limit != 7:
        client._pump()

    def reason(path=f"/3/device/{TOKEN}", headers=None, body=BODY, method="POST"):
        status, answer_headers, answer = client.request(path, alert(extra=auth) if headers is None else headers, body, method)
        assert "apns-id" in answer_headers
        return status, (answer or {}).get("reason")

    assert reason(f"/3/device/{INVALID}") == (400, "BadDeviceToken")
    status, _, gone = client.request(f"/3/device/{GONE}", alert(extra=auth), BODY)
    assert (status, gone) == (410, {"reason": "Unregistered", "timestamp": 1795000000123})
    assert reason("/3/device/") == (400, "MissingDeviceToken")
    assert reason("/3/device/xyz") == (400, "BadDeviceToken")
    assert reason("/2/device/" + TOKEN) == (404, "BadPath")
    assert reason(method="GET", body=b"") == (405, "MethodNotAllowed")
    assert reason(headers=[h for h in alert(extra=auth) if h[0] != "apns-topic"]) == (400, "MissingTopic")
    assert reason(headers=alert(push_type="background", extra=auth)) == (400, "BadPriority")
    assert reason(headers=alert(priority="7", extra=auth)) == (400, "BadPriority")
    assert reason(headers=alert(push_type="banner", extra=auth)) == (400, "InvalidPushType")
    assert reason(headers=alert(push_type="voip", extra=auth)) == (400, "BadTopic")
    assert reason(headers=alert(topic="com.example.app.voip", push_type="voip", extra=auth), body=b"{" + b" " * 5000 + b"}")[0] == 200
    assert reason(headers=alert(extra=auth + [("apns-expiration", "soon")])) == (400, "DuplicateHeaders")
    assert reason(headers=[h for h in alert(extra=auth) if h[0] != "apns-expiration"] + [("apns-expiration", "soon")]) == (400, "BadExpirationDate")
    assert reason(headers=alert(extra=auth + [("apns-id", "not-a-uuid")])) == (400, "BadMessageId")
    assert reason(headers=alert(extra=auth + [("apns-collapse-id", "x" * 65)])) == (400, "BadCollapseId")
    assert reason(body=b"") == (400, "PayloadEmpty")
    assert reason(body=b"{" + b" " * 4096 + b"}") == (413, "PayloadTooLarge")
    assert reason(headers=alert()) == (403, "MissingProviderToken")
    # a connection that has a token refuses another within 20 minutes for its rate, before looking at its signature
    other = python_token(pki / "other-token-key.p8", now)
    newer = python_token(pki / "AuthKey_KEY1234567.p8", now + 1)
    assert reason(headers=alert(extra=[("authorization", f"bearer {newer}")])) == (429, "TooManyProviderTokenUpdates")
    assert reason(headers=alert(extra=[("authorization", f"bearer {other}")])) == (429, "TooManyProviderTokenUpdates")
    client.close()
    # a new connection verifies the token it starts with, and may start with the newer one
    fresh = Client(port, pki)
    def first(token):
        status, _, answer = fresh.request(f"/3/device/{TOKEN}", alert(extra=[("authorization", f"bearer {token}")]), BODY)
        return status, (answer or {}).get("reason")
    assert first(other) == (403, "InvalidProviderToken")
    wrong_kid = python_token(pki / "AuthKey_KEY1234567.p8", now, kid="OTHERKEY00")
    assert first(wrong_kid) == (403, "InvalidProviderToken")
    old = python_token(pki / "AuthKey_KEY1234567.p8", now - 3700)
    assert first(old) == (403, "ExpiredProviderToken")
    assert first(newer) == (200, None)
    fresh.close()
    counts = summary(proc)
    assert counts["api_connections"] == 2
    assert counts["api_answers"]["200"] == 3
    assert counts["api_answers"]["400 BadDeviceToken"] == 2
    assert counts["api_answers"]["410 Unregistered"] == 1
    records = [json.loads(line) for line in (tmp_path / "record.jsonl").read_text().splitlines()]
    assert len(records) == 3
    assert records[0]["token"] == TOKEN and records[0]["payload"] == {"aps": {"alert": "hello"}}
    assert records[0]["apns_id"] == "123E4567-E89B-12D3-A456-426614174000"


def test_certificate_connections_and_faults(simulator, pki):
    port, proc = simulator("--goaway-every", "3", "--max-concurrent-streams", "50")
    client = Client(port, pki, cert="app")
    assert client.stream_limit == 50
    # the topic may be omitted on a certificate connection; another app's topic is not allowed
    assert client.request(f"/3/device/{TOKEN}", [("apns-push-type", "alert")], BODY)[0] == 200
    assert client.request(f"/3/device/{TOKEN}", alert(topic="com.example.other"), BODY)[2] == {"reason": "TopicDisallowed"}
    # the third answer is followed by GOAWAY naming its stream; a later stream goes unanswered
    third = client.send(f"/3/device/{TOKEN}", alert(), BODY)
    assert client.wait(third)[0] == 200
    while client.goaway is None and not client.closed:
        client._pump()
    assert client.goaway is not None and client.goaway.last_stream_id == third
    client.close()
    counts = summary(proc)
    assert counts["api_goaways"] == 1
    assert counts["api_answers"] == {"200": 2, "400 TopicDisallowed": 1}


def test_shutdown_close_and_rates(simulator, pki):
    port, proc = simulator("--shutdown-every", "2")
    client = Client(port, pki, cert="app")
    first = client.request(f"/3/device/{TOKEN}", alert(), BODY)
    second = client.request(f"/3/device/{TOKEN}", alert(), BODY)
    assert second[0] == 503 and second[2] == {"reason": "Shutdown"}
    while client.goaway is None and not client.closed:
        client._pump()
    client.close()
    port2, proc2 = simulator("--close-every", "2")
    cut = Client(port2, pki, cert="app")
    assert cut.request(f"/3/device/{TOKEN}", alert(), BODY)[0] == 200
    assert cut.request(f"/3/device/{TOKEN}", alert(), BODY) is None  # no answer: the connection is cut
    cut.close()
    counts = summary(proc)
    assert counts["api_answers"] == {"200": 1, "503 Shutdown": 1}
    assert first[0] == 200 and counts["api_goaways"] == 1
    assert summary(proc2)["api_abrupt_closes"] == 1
    port3, proc3 = simulator("--rate-429", "0.25", "--rate-503", "0.25", "--seed", "7")
    rated = Client(port3, pki, cert="app")
    seen = {}
    for _ in range(60):
        status, _, body = rated.request(f"/3/device/{TOKEN}", alert(), BODY)
        key = f"{status} {body['reason']}" if body else str(status)
        seen[key] = seen.get(key, 0) + 1
    rated.close()
    assert set(seen) == {"200", "429 TooManyRequests", "503 ServiceUnavailable"}
    assert summary(proc3)["api_answers"] == seen
