#!/usr/bin/env python3
"""Generates random notification events (JSON lines) for the interop tests: mostly valid, with every kind of
invalid event, random insignificant whitespace, escapes, number spellings, Unicode text and oversized payloads
(with and without truncate_alert). The events are written by this generator's own serializer so that spellings
vary; the encoders must keep them byte for byte.

With "http2" as a third argument, events also carry the HTTP/2 fields (push_type, collapse_id, apns_id, priority
1), valid and not, and oversized payloads are sized for the HTTP/2 limits.

usage: gen_events.py SEED COUNT [http2] > events.jsonl
"""
import json
import random
import sys


class Raw:
    """A value written exactly as given."""
    def __init__(self, text):
        self.text = text


def ws(r):
    # no newline: events are JSON lines
    return r.choice(["", "", "", " ", "  ", "\t", " \t ", "\r "])


def string_literal(r, s):
    out = ['"']
    for c in s:
        if c == '"':
            out.append('\\"')
        elif c == "\\":
            out.append("\\\\")
        elif c == "\n":
            out.append(r.choice(["\\n", "\\u000a"]))
        elif ord(c) < 0x20:
            out.append("\\u%04x" % ord(c))
        elif ord(c) > 0x7F and r.random() < 0.3:
            code = ord(c)
            if code > 0xFFFF:
                code -= 0x10000
                out.append("\\u%04x\\u%04x" % (0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF)))
            else:
                out.append("\\u%04X" % code if r.random() < 0.5 else "\\u%04x" % code)
        elif c == "/" and r.random() < 0.5:
            out.append("\\/")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def emit(r, v):
    if isinstance(v, Raw):
        return v.text
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return r.choice([str(v), str(v), f"{v}.0", f"{v}e0", f"{v}E+0"]) if v >= 0 else str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return string_literal(r, v)
    if isinstance(v, list):
        return "[" + ws(r) + ("," + ws(r)).join(emit(r, x) + ws(r) for x in v) + "]"
    if isinstance(v, dict):
        parts = [ws(r) + string_literal(r, k) + ws(r) + ":" + ws(r) + emit(r, x) + ws(r) for k, x in v.items()]
        return "{" + ",".join(parts) + "}" if parts else "{" + ws(r) + "}"
    raise TypeError(v)


TEXTS = ["Hello", "Hi there, your order shipped", "Grüße aus Köln", "👋 wave", "你好，世界", "e\u0301te\u0301",
         "tab\there", 'quote " and \\ backslash', "line\nbreak", "🇫🇷🇩🇪 flags", "👍🏽 ok", "a/b", "x" * 40,
         "\u0000 nul", "emoji 😀😀😀"]


def text(r, n=None):
    if n:
        return "".join(r.choice(TEXTS) + " " for _ in range(n))
    return r.choice(TEXTS)


def token(r):
    n = r.choice([32, 32, 32, 32, 1, 8, 64, 100])
    h = "".join(r.choice("0123456789abcdef") for _ in range(2 * n))
    style = r.random()
    if style < 0.2:
        h = h.upper()
    elif style < 0.35:
        h = "<" + " ".join(h[i:i + 8] for i in range(0, len(h), 8)) + ">"
    elif style < 0.45:
        h = " " + h + " "
    return h


def aps(r, big=False):
    a = {}
    kind = r.random()
    if kind < 0.5:
        a["alert"] = text(r, 180 if big else None)
    elif kind < 0.8:
        alert = {"body": text(r, 180 if big else None)}
        if r.random() < 0.5:
            alert = {"title": text(r), **alert}
        if r.random() < 0.3:
            alert["loc-args"] = [text(r), "2"]
        if r.random() < 0.2:
            alert["action-loc-key"] = None
        a["alert"] = alert
    elif kind < 0.9:
        a["content-available"] = 1
    else:
        a["badge"] = r.randint(0, 99)
    if r.random() < 0.3:
        a["badge"] = r.randint(0, 999)
    if r.random() < 0.3:
        a["sound"] = "default"
    if r.random() < 0.1:
        a["category"] = "MESSAGE"
    if r.random() < 0.1:
        a["mutable-content"] = 1
    return a


def payload(r, big=False):
    p = {"aps": aps(r, big)}
    if r.random() < 0.4:
        p["acme"] = {"id": r.randint(0, 10**6), "tags": [text(r), 1.5, None, True], "ratio": Raw("-0.5e+3")}
    if r.random() < 0.2:
        p = dict(reversed(list(p.items())))
    return p


def valid_event(r, n):
    ev = {"id": r.choice([f"evt-{n}", f"order {n}", f"é-{n}", f"\"q{n}", f"{n}😀"]), "app": "com.example.app",
          "token": token(r)}
    big = r.random() < 0.15
    ev["payload"] = payload(r, big)
    if big or r.random() < 0.1:
        ev["truncate_alert"] = r.random() < 0.7
    choice = r.random()
    if choice < 0.2:
        ev["expiration"] = 0
    elif choice < 0.35:
        ev["expiration"] = r.randint(1_700_000_000, 1_900_000_000)
    elif choice < 0.45:
        ev["expiration"] = r.choice(["2030-01-01T00:00:00Z", "2029-06-30T23:59:59.999+02:00", "2020-01-01t00:00:00z",
                                     "2031-02-28T12:00:00-05:30"])
    if r.random() < 0.2:
        ev["environment"] = r.choice(["production", "sandbox"])
    if r.random() < 0.2:
        is_background = list(ev["payload"]["aps"]) == ["content-available"]
        ev["priority"] = 5 if is_background else r.choice([5, 10])
    if r.random() < 0.1:
        ev["trace"] = {"span": text(r)}
    if r.random() < 0.3:
        ev = dict(r.sample(list(ev.items()), len(ev)))
    return ev


def invalid_event(r, n):
    ev = valid_event(r, n)
    ev["payload"] = payload(r)
    ev.pop("truncate_alert", None)
    ev.pop("priority", None)
    kind = r.randrange(22)
    if kind == 0: del ev["id"]
    elif kind == 1: ev["id"] = 7
    elif kind == 2: ev["id"] = ""
    elif kind == 3: ev["id"] = "x" * 129
    elif kind == 4: del ev["app"]
    elif kind == 5: ev["environment"] = "staging"
    elif kind == 6: ev["token"] = 12
    elif kind == 7: ev["payload"] = [1]
    elif kind == 8: ev["expiration"] = "soon"
    elif kind == 9: ev["expiration"] = -5
    elif kind == 10: ev["truncate_alert"] = "yes"
    elif kind == 11: ev["token"] = "zz" + ev["token"]
    elif kind == 12: ev["token"] = "abc"
    elif kind == 13: ev["token"] = "ab" * 101
    elif kind == 14: ev["payload"] = {"alert": "no aps"}
    elif kind == 15: ev["payload"] = {"aps": {"badge": -1}}
    elif kind == 16: ev["payload"] = {"aps": {"alert": 5}}
    elif kind == 17: ev["priority"] = 7
    elif kind == 18: ev["payload"] = {"aps": {"content-available": 1}}; ev["priority"] = 10
    elif kind == 19: ev["payload"] = {"aps": {"alert": "x" * 2100}}
    elif kind == 20: ev["expiration"] = 1_000_000_000  # long past: expired
    else: return r.choice(["not json", "[1, 2]", '"a string"', '{"unterminated": ', "{}", "null"])
    return ev


PUSH_TYPES = ["alert", "background", "location", "voip", "complication", "fileprovider", "mdm", "liveactivity",
              "pushtotalk", "widgets"]


def with_http2_fields(r, ev):
    """Adds HTTP/2 fields to a valid event; now and then one that is wrong."""
    if r.random() < 0.5:
        ev["push_type"] = r.choice(PUSH_TYPES + ["alert", "voip", "background"])
    if r.random() < 0.3:
        ev["collapse_id"] = r.choice(["c1", "order-update", "é" * 32, text(r)[:20]])
    if r.random() < 0.3:
        ev["apns_id"] = r.choice(["123e4567-e89b-12d3-a456-426614174000", "A1B2C3D4-E5F6-4789-ABCD-EF0123456789"])
    if r.random() < 0.15:
        ev["priority"] = r.choice([1, 5, 10])
    if r.random() < 0.25 and "payload" in ev and isinstance(ev["payload"], dict):
        # sizes around the HTTP/2 limits (4096, 5120 for voip)
        ev["payload"] = {"aps": {"alert": {"body": text(r, r.choice([330, 400, 480]))}}}
        ev["truncate_alert"] = r.random() < 0.6
    aps = ev.get("payload", {}).get("aps") if isinstance(ev.get("payload"), dict) else None
    if isinstance(aps, dict):
        if ev.get("push_type") == "liveactivity" and r.random() < 0.8:
            # A Live Activity update with what its event needs (SPEC section 9), now and then without it.
            event = r.choice(["start", "update", "end"])
            aps.update({"event": event, "timestamp": r.randint(1_700_000_000, 1_900_000_000)})
            if event != "end":
                aps["content-state"] = {"score": f"{r.randint(0, 5)}-{r.randint(0, 5)}"}
            if event == "start":
                aps.update({"attributes-type": "MatchAttributes", "attributes": {"home": "A", "away": "B"}})
            if r.random() < 0.1:
                del aps["timestamp"]
        if r.random() < 0.1:
            # Apple's current keys: a critical alert, an interruption level; now and then a wrong value.
            aps["sound"] = {"critical": 1, "name": "siren.caf", "volume": r.choice([0.5, 1.0, 1.5])}
            aps["interruption-level"] = r.choice(["critical", "time-sensitive", "urgent"])
    if r.random() < 0.08:
        kind = r.randrange(6)
        if kind == 0: ev["push_type"] = r.choice(["Alert", "push", "", 5])
        elif kind == 1: ev["collapse_id"] = "x" * 65
        elif kind == 2: ev["collapse_id"] = 12
        elif kind == 3: ev["apns_id"] = r.choice(["123e4567e89b12d3a456426614174000", "not-a-uuid", "{123e4567-e89b-12d3-a456-426614174000}"])
        elif kind == 4: ev["push_type"] = "background"; ev["priority"] = 10
        else: ev["priority"] = 1
    return ev


def main():
    seed, count = int(sys.argv[1]), int(sys.argv[2])
    http2 = len(sys.argv) > 3 and sys.argv[3] == "http2"
    r = random.Random(seed)
    out = []
    for n in range(count):
        ev = valid_event(r, n) if r.random() < 0.7 else invalid_event(r, n)
        if http2 and isinstance(ev, dict):
            ev = with_http2_fields(r, ev)
        out.append(ev if isinstance(ev, str) else ws(r) + emit(r, ev) + ws(r))
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
