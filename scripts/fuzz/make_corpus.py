"""Seed corpora for the fuzz targets, from the JSON Schemas' examples (schemas/*/examples).

  FuzzEventDecoder   every notification-event example, valid and invalid, as is
  FuzzErrorResponse  the error response each delivery-error example with a gateway status stands for
                     (command 8, status, its source offset as the identifier), one file each and all in a row
  FuzzFeedback       the feedback tuple each feedback-event example stands for (timestamp, token length, token),
                     one file each and all in a row, and the row cut short
  FuzzAPNsResponse   Apple's answers (status, body) for each kind of outcome
  FuzzProviderToken  provider tokens with a signature of the right length (the parser does not verify it)
  FuzzAPIRequest     requests to the simulator's HTTP/2 API: valid ones of several push types and refused ones
  FuzzHTTP2Server    what a client (Python's h2) sends on a connection to the API after its preface: requests with
                     bodies, a header block in CONTINUATION frames, trailers, PING, WINDOW_UPDATE, RST_STREAM, GOAWAY
  FuzzHTTP2Client    what a server sends the worker: SETTINGS, responses (HPACK by Python's hpack, Huffman-coded and
                     indexed) with and without bodies, WINDOW_UPDATE, PING, RST_STREAM, GOAWAY
  FuzzSuppressionEntry  records of the suppression topic (key, NUL, value; a key alone is a tombstone): one of each
                     reason, offsets and fractions in the time, tombstones, and a value naming another token
  FuzzNotificationDecoder  what a provider sends the simulator's binary gateway (after a byte that picks the size
                     of reads): notifications in the three formats, one after another, and ones it refuses
"""
import base64
import glob
import json
import os
import struct
import sys

root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
out = sys.argv[1]


def write(target, name, data):
    os.makedirs(os.path.join(out, target), exist_ok=True)
    with open(os.path.join(out, target, name), "wb") as f:
        f.write(data)


for path in sorted(glob.glob(f"{root}/schemas/notification-event/examples/*/*.json")):
    kind = os.path.basename(os.path.dirname(path))
    with open(path, "rb") as f:
        write("FuzzEventDecoder", f"{kind}-{os.path.basename(path)}", f.read())

responses = []
for path in sorted(glob.glob(f"{root}/schemas/delivery-error-event/examples/valid/*.json")):
    example = json.load(open(path))
    # The binary gateway's statuses (HTTP/2 errors carry HTTP statuses, which are no error response's).
    if example.get("status") is not None and example["status"] < 256:
        data = struct.pack(">BBI", 8, example["status"], example["source"]["offset"] % 2**32)
        responses.append(data)
        write("FuzzErrorResponse", os.path.basename(path), data)
write("FuzzErrorResponse", "all-in-a-row", b"".join(responses))
write("FuzzErrorResponse", "shutdown-10", struct.pack(">BBI", 8, 10, 4242))

tuples = []
for path in sorted(glob.glob(f"{root}/schemas/feedback-event/examples/valid/*.json")):
    example = json.load(open(path))
    token = bytes.fromhex(example["token"])
    data = struct.pack(">IH", example["timestamp_unix"], len(token)) + token
    tuples.append(data)
    write("FuzzFeedback", os.path.basename(path), data)
row = b"".join(tuples)
write("FuzzFeedback", "all-in-a-row", row)
write("FuzzFeedback", "cut-short", row[:-3])
# Apple's answers: two bytes of status, then the body.
answers = {
    "accepted": (200, b""),
    "bad-device-token": (400, b'{"reason":"BadDeviceToken"}'),
    "unregistered": (410, b'{"reason":"Unregistered","timestamp":1790000000123}'),
    "too-many-requests": (429, b'{"reason":"TooManyRequests"}'),
    "shutdown": (503, b'{ "reason" : "Shutdown" , "extra": [1, {"a": null}] }'),
    "escaped": (400, b'{"reason":"Bad\\u0044eviceToken\\n","timestamp":1.5e3}'),
}
for name, (status, body) in answers.items():
    write("FuzzAPNsResponse", name, struct.pack(">H", status) + body)


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=")


# Provider tokens: header.claims.signature, the signature 64 bytes that verify nothing (the parser does not check it).
for name, header, claims in [
    ("token", b'{"alg":"ES256","kid":"KEY1234567"}', b'{"iss":"TEAM123456","iat":1790000000}'),
    ("token-escaped", b'{"alg":"ES256","kid":"K\\u00e9Y"}', b'{"iss":"T\\"EAM","iat":-1}'),
    ("token-other-alg", b'{"alg":"HS256","kid":"KEY1234567"}', b'{"iss":"TEAM123456","iat":1}'),
]:
    write("FuzzProviderToken", name, b64url(header) + b"." + b64url(claims) + b"." + b64url(bytes(range(64))))

# Requests to the API: an authentication byte (even: certificate), `name:value` lines, a NUL, the body.
token = "0123456789abcdef" * 4
valid = [":method:POST", ":path:/3/device/" + token, ":scheme:https", "apns-topic:com.example.app",
         "apns-push-type:alert", "apns-priority:10", "apns-expiration:0", "apns-id:123e4567-e89b-12d3-a456-426614174000"]
requests = {
    "valid": (valid, b'{"aps":{"alert":"hi"}}'),
    "background": (valid[:4] + ["apns-push-type:background", "apns-priority:5", "apns-collapse-id:c1"], b'{"aps":{}}'),
    "voip": (valid[:3] + ["apns-topic:com.example.app.voip", "apns-push-type:voip"], b'{"aps":{}}'),
    "refused-token": ([":method:POST", ":path:/3/device/" + "ab" * 32, "apns-topic:com.example.app"], b"{}"),
    "unregistered": ([":method:POST", ":path:/3/device/" + "cd" * 32], b"{}"),
    "duplicate": (valid + ["apns-topic:com.example.app"], b"{}"),
    "token-auth": (valid + ["authorization:bearer a.b.c"], b"{}"),
}
for name, (lines, body) in requests.items():
    auth = b"\x01" if name == "token-auth" else b"\x00"
    write("FuzzAPIRequest", name, auth + "\n".join(lines).encode() + b"\x00" + body)


def http2_connections():
    """Client byte streams, each without the connection preface (the target adds it)."""
    import h2.config
    import h2.connection
    import h2.events

    def client(**settings):
        connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        connection.local_settings.update(settings)
        connection.initiate_connection()
        connection.data_to_send()  # the preface and SETTINGS: the SETTINGS again below, without the preface
        return connection

    def request(connection, stream, body=b'{"aps":{"alert":"hi"}}', extra=()):
        headers = [(":method", "POST"), (":scheme", "https"), (":authority", "localhost"),
                   (":path", "/3/device/" + token), ("apns-topic", "com.example.app")] + list(extra)
        connection.send_headers(stream, headers)
        connection.send_data(stream, body, end_stream=True)

    settings = bytes.fromhex("000000040000000000")  # an empty SETTINGS
    ack = bytes.fromhex("000000040100000000")
    connections = {}
    c = client()
    request(c, 1)
    request(c, 3, extra=[("authorization", "bearer " + "a" * 120)])
    connections["two-requests"] = settings + ack + c.data_to_send()
    c = client()
    c.max_outbound_frame_size = 24  # as if the server allowed frames that small: CONTINUATION, DATA in pieces
    request(c, 1, extra=[("x-long", "v" * 100)])
    c.ping(b"12345678")
    c.increment_flow_control_window(1000)
    connections["continuation-ping-window"] = settings + ack + c.data_to_send()
    c = client()
    c.send_headers(1, [(":method", "POST"), (":scheme", "https"), (":authority", "a"), (":path", "/3/device/" + token)])
    c.send_data(1, b"{}")
    c.send_headers(1, [("x-trailer", "t")], end_stream=True)
    c.send_headers(3, [(":method", "POST"), (":scheme", "https"), (":authority", "a"), (":path", "/")])
    c.reset_stream(3)
    c.close_connection()
    connections["trailers-reset-goaway"] = settings + ack + c.data_to_send()
    return connections


def http2_server_streams():
    """Server byte streams to a client that opened streams 1, 3 and 5."""
    import hpack

    def frame(kind, flags, stream, payload=b""):
        return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload

    encoder = hpack.Encoder()
    settings = frame(4, 0, 0, struct.pack(">HI", 3, 1000) + struct.pack(">HI", 4, 65535))
    ok = frame(1, 5, 1, encoder.encode([(":status", "200"), ("apns-id", "6e1b0f3c-2b1e-4c1a-9d7e-000000000001")]))
    bad = frame(1, 4, 3, encoder.encode([(":status", "400"), ("apns-id", "6e1b0f3c-2b1e-4c1a-9d7e-000000000003"),
                                          ("content-type", "application/json")]))
    body = frame(0, 1, 3, b'{"reason":"BadDeviceToken"}')
    gone = frame(1, 4, 5, encoder.encode([(":status", "410"), ("apns-id", "x")], huffman=False))
    gone_body = frame(0, 1, 5, b'{"reason":"Unregistered","timestamp":1700000000000}')
    control = (frame(8, 0, 0, struct.pack(">I", 100000)) + frame(8, 0, 1, struct.pack(">I", 5000))
               + frame(6, 0, 0, b"12345678") + frame(4, 1, 0))
    return {
        "answers": settings + ok + bad + body + gone + gone_body,
        "control-reset-goaway": settings + control + frame(3, 0, 3, struct.pack(">I", 7)) + frame(7, 0, 0, struct.pack(">II", 1, 0)),
    }


try:
    for name, data in http2_server_streams().items():
        for step in (b"\x00", b"\x05"):
            write("FuzzHTTP2Client", f"{name}-{step[0]}", step + data)
except ImportError:
    print("FuzzHTTP2Client: no hpack package; no seeds", file=sys.stderr)

try:
    for name, data in http2_connections().items():
        for step in (b"\x00", b"\x07"):
            write("FuzzHTTP2Server", f"{name}-{step[0]}", step + data)
except ImportError:
    print("FuzzHTTP2Server: no h2 package; no seeds", file=sys.stderr)

# Suppression records: the key, a NUL, the value (SPEC section 10); a key without a NUL is a tombstone.
hex_token = "0123456789abcdef" * 4
suppression_key = f"com.example.app/production/{hex_token}".encode()
for reason, time in [("feedback", "2026-09-21T14:13:20Z"), ("invalid_token", "2026-09-21T14:13:20.123+02:00"),
                     ("unregistered", "1970-01-01t00:00:00z"), ("bad_device_token", "2106-02-07T06:28:15Z")]:
    value = {"app": "com.example.app", "environment": "production", "token": hex_token, "invalidated_at": time,
             "reason": reason}
    write("FuzzSuppressionEntry", reason, suppression_key + b"\x00" + json.dumps(value).encode())
write("FuzzSuppressionEntry", "tombstone", suppression_key)
write("FuzzSuppressionEntry", "tombstone-sandbox-upper-case", f"com.example.app/sandbox/{hex_token.upper()}".encode())
write("FuzzSuppressionEntry", "another-token", suppression_key + b"\x00" + json.dumps(
    {"app": "com.example.app", "environment": "production", "token": "ab" * 32, "invalidated_at": "2026-09-21T14:13:20Z",
     "reason": "feedback"}).encode())

# Binary notifications: a byte that picks the size of reads (1 to 16), then the stream.
def simple(token, payload):
    return struct.pack(">BH", 0, len(token)) + token + struct.pack(">H", len(payload)) + payload


def enhanced(identifier, expiration, token, payload):
    return struct.pack(">BIIH", 1, identifier, expiration, len(token)) + token + struct.pack(">H", len(payload)) + payload


def frame(*items):
    body = b"".join(struct.pack(">BH", item, len(data)) + data for item, data in items)
    return struct.pack(">BI", 2, len(body)) + body


device = bytes(range(32))
alert = b'{"aps":{"alert":"hi"}}'
full_frame = frame((1, device), (2, alert), (3, struct.pack(">I", 7)), (4, struct.pack(">I", 1790000000)), (5, b"\x05"))
notifications = {
    "simple": simple(device, alert),
    "enhanced": enhanced(42, 0, device, alert),
    "frame": full_frame,
    "frame-token-and-payload-only": frame((2, alert), (1, device)),
    "all-three": simple(device, alert) + enhanced(43, 1, device, alert) + full_frame,
    "empty-token": enhanced(44, 0, b"", alert),
    "long-token": frame((1, bytes(101)), (2, alert), (3, struct.pack(">I", 8))),
    "long-payload": enhanced(45, 0, device, b"x" * 257),
    "repeated-item": frame((1, device), (2, alert), (1, device)),
    "bad-priority": frame((1, device), (2, alert), (5, b"\x07")),
    "unknown-command": b"\x09" + full_frame,
}
for name, data in notifications.items():
    for step in (b"\x00", b"\x06"):
        write("FuzzNotificationDecoder", f"{name}-{step[0]}", step + data)

for target in sorted(os.listdir(out)):
    print(f"{target}: {len(os.listdir(os.path.join(out, target)))} seeds")
