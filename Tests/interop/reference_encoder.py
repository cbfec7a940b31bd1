#!/usr/bin/env python3
"""An independent implementation of `pushworker encode`, written from SPEC sections 2, 3 and 6 and the seeds.

It shares no code with the Swift implementation: JSON is parsed with Python's json module, raw spans are found by a
small scanner of its own, graphemes come from the `regex` module's \\X. Used by test_encode_interop.py.

With --format http2 it prints the provider API request of SPEC section 9 as JSON instead (apns-id by uuid.uuid5).

usage: reference_encoder.py FILE --format frame|enhanced|simple|http2 --now T [--identifier-start N] [--default-ttl S]
       [--topic MDM_TOPIC]
"""
import argparse
import datetime
import json
import re
import struct
import sys
import uuid

import regex

WS = " \t\n\r"


class Reject(Exception):
    def __init__(self, reason):
        self.reason = reason


# ---- raw spans -------------------------------------------------------------------------------------------------

def skip_ws(s, i):
    while i < len(s) and s[i] in WS:
        i += 1
    return i


def string_end(s, i):
    """s[i] is the opening quote; returns the index after the closing quote."""
    i += 1
    while s[i] != '"':
        i += 2 if s[i] == "\\" else 1
    return i + 1


def value_end(s, i):
    c = s[i]
    if c == '"':
        return string_end(s, i)
    if c in "{[":
        close = "}" if c == "{" else "]"
        i = skip_ws(s, i + 1)
        if s[i] == close:
            return i + 1
        while True:
            if c == "{":
                i = skip_ws(s, string_end(s, i))
                i = skip_ws(s, i + 1)  # the colon
            i = skip_ws(s, value_end(s, i))
            if s[i] == close:
                return i + 1
            i = skip_ws(s, i + 1)  # the comma
    j = i
    while j < len(s) and s[j] not in WS + ",]}":
        j += 1
    return j


def members(s, i):
    """Members of the object starting at s[i]: {decoded key: (value start, value end)} (first occurrence)."""
    out = {}
    i = skip_ws(s, i + 1)
    if s[i] == "}":
        return out
    while True:
        k_end = string_end(s, i)
        key = json.loads(s[i:k_end])
        i = skip_ws(s, skip_ws(s, k_end) + 1)
        v_end = value_end(s, i)
        out.setdefault(key, (i, v_end))
        i = skip_ws(s, v_end)
        if s[i] == "}":
            return out
        i = skip_ws(s, i + 1)


def compact(text):
    out = []
    in_string = False
    i = 0
    while i < len(text):
        c = text[i]
        if in_string:
            if c == "\\":
                out.append(text[i:i + 2])
                i += 2
                continue
            if c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in WS:
            i += 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


# ---- validation ------------------------------------------------------------------------------------------------

SEEDS_KEYS = ("id", "app", "environment", "token", "payload", "expiration", "priority", "truncate_alert",
              "push_type", "collapse_id", "apns_id",
              "aps", "alert", "badge", "sound", "content-available", "category", "body", "title",
              "action-loc-key", "loc-key", "loc-args", "title-loc-key", "title-loc-args", "launch-image")
# Apple's current aps and alert keys (SPEC section 9): checked, repeats included, for http2 apps only.
CURRENT_APS_KEYS = ("thread-id", "mutable-content", "target-content-id", "interruption-level", "relevance-score",
                    "filter-criteria", "event", "timestamp", "stale-date", "dismissal-date", "content-state",
                    "attributes-type", "attributes", "input-push-token", "input-push-channel",
                    "subtitle", "subtitle-loc-key", "subtitle-loc-args")


def duplicates_hook(http2):
    checked = SEEDS_KEYS + (CURRENT_APS_KEYS if http2 else ())

    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        for k in checked:
            if keys.count(k) > 1:
                return {"__duplicate__": k, **dict(pairs)}
        return dict(pairs)
    return no_duplicates


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


RFC3339 = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def parse_rfc3339(text):
    m = RFC3339.match(text)
    if not m:
        return None
    y, mo, d, h, mi, sec = (int(g) for g in m.groups()[:6])
    if h > 23 or mi > 59 or sec > 60:
        return None
    try:
        base = datetime.datetime(y, mo, d, tzinfo=datetime.timezone.utc)
    except ValueError:
        return None
    tz = m.group(8)
    offset = 0
    if tz not in "Zz":
        oh, om = int(tz[1:3]), int(tz[4:6])
        if oh > 23 or om > 59:
            return None
        offset = (oh * 3600 + om * 60) * (1 if tz[0] == "+" else -1)
    return int(base.timestamp()) + h * 3600 + mi * 60 + sec - offset


def parse_token(text):
    t = text.strip(" ")
    if t.startswith("<") or t.endswith(">"):
        if not (t.startswith("<") and t.endswith(">") and len(t) >= 2):
            return None
        t = t[1:-1]
    digits = t.replace(" ", "")
    if not re.fullmatch(r"[0-9A-Fa-f]*", digits) or len(digits) % 2 or not 1 <= len(digits) // 2 <= 100:
        return None
    return bytes.fromhex(digits)


def is_whole(v, minimum=0):
    return is_number(v) and v >= minimum and v == int(v)


def check_aps(aps, http2=False):
    """SPEC section 2's aps rules, or for an http2 app (SPEC section 9) Apple's current key reference."""
    if not isinstance(aps, dict) or "__duplicate__" in aps:
        return False
    if "alert" in aps:
        alert = aps["alert"]
        if isinstance(alert, dict):
            if "__duplicate__" in alert:
                return False
            strings = ("body", "title", "loc-key", "title-loc-key", "launch-image")
            lists = ("loc-args", "title-loc-args")
            if http2:
                strings += ("subtitle", "subtitle-loc-key")
                lists += ("subtitle-loc-args",)
            for k in strings:
                if k in alert and not isinstance(alert[k], str):
                    return False
            if not http2 and "action-loc-key" in alert and not (alert["action-loc-key"] is None or isinstance(alert["action-loc-key"], str)):
                return False
            for k in lists:
                if k in alert and not (isinstance(alert[k], list) and all(isinstance(x, str) for x in alert[k])):
                    return False
        elif not isinstance(alert, str):
            return False
    if "badge" in aps and not is_whole(aps["badge"]):
        return False
    if "category" in aps and not isinstance(aps["category"], str):
        return False
    if "content-available" in aps and not (is_number(aps["content-available"]) and aps["content-available"] == 1):
        return False
    if not http2:
        return "sound" not in aps or isinstance(aps["sound"], str)
    sound = aps.get("sound", "")
    if isinstance(sound, dict):
        if "critical" in sound and not (is_number(sound["critical"]) and sound["critical"] in (0, 1)):
            return False
        if "name" in sound and not isinstance(sound["name"], str):
            return False
        if "volume" in sound and not (is_number(sound["volume"]) and 0 <= sound["volume"] <= 1):
            return False
    elif not isinstance(sound, str):
        return False
    for k in ("thread-id", "target-content-id", "filter-criteria", "attributes-type", "input-push-channel"):
        if k in aps and not isinstance(aps[k], str):
            return False
    for k in ("mutable-content", "input-push-token"):
        if k in aps and not (is_number(aps[k]) and aps[k] == 1):
            return False
    if "interruption-level" in aps and aps["interruption-level"] not in ("passive", "active", "time-sensitive", "critical"):
        return False
    if "relevance-score" in aps and not is_number(aps["relevance-score"]):
        return False
    if "event" in aps and aps["event"] not in ("start", "update", "end"):
        return False
    for k in ("timestamp", "stale-date", "dismissal-date"):
        if k in aps and not is_whole(aps[k]):
            return False
    for k in ("content-state", "attributes"):
        if k in aps and not isinstance(aps[k], dict):
            return False
    return True


def live_activity_complete(aps):
    """What a push type liveactivity event needs in its aps (SPEC section 9)."""
    if "event" not in aps or "timestamp" not in aps:
        return False
    if aps["event"] in ("start", "update") and "content-state" not in aps:
        return False
    return aps["event"] != "start" or ("attributes-type" in aps and "attributes" in aps)


# ---- truncation ------------------------------------------------------------------------------------------------

def raw_scalars(raw):
    """(character, raw offset) for each code point of a JSON string's raw content."""
    out = []
    i = 0
    while i < len(raw):
        if raw[i] == "\\":
            e = raw[i + 1]
            if e == "u":
                unit = int(raw[i + 2:i + 6], 16)
                if 0xD800 <= unit <= 0xDBFF:
                    low = int(raw[i + 8:i + 12], 16)
                    out.append((chr(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)), i))
                    i += 12
                else:
                    out.append((chr(unit), i))
                    i += 6
            else:
                out.append(({"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}.get(e, e), i))
                i += 2
        else:
            out.append((raw[i], i))
            i += 1
    return out


def truncate(payload_text, span, limit):
    """span: (start, end) of the alert string token within payload_text (quotes included)."""
    head = compact(payload_text[:span[0]]) + '"'
    tail = '"' + compact(payload_text[span[1]:])
    raw = payload_text[span[0] + 1:span[1] - 1]
    budget = limit - len(head.encode()) - len(tail.encode()) - 3
    if budget < 0:
        return None
    scalars = raw_scalars(raw)
    offsets = [o for _, o in scalars] + [len(raw)]
    text = "".join(c for c, _ in scalars)
    keep, count = "", 0
    for g in regex.findall(r"\X", text):
        count += len(g)
        candidate = raw[:offsets[count]]
        if len(candidate.encode()) > budget:
            break
        keep = candidate
    return head + keep + "…" + tail


# ---- events ----------------------------------------------------------------------------------------------------

def decode_event(line, limit, fmt="frame"):
    """Returns (id or None, (token bytes, payload bytes, expiration or None, priority)) or raises Reject."""
    try:
        text = line.decode("utf-8")
        ev = json.loads(text, object_pairs_hook=duplicates_hook(fmt == "http2"))
    except (UnicodeDecodeError, ValueError):
        raise Reject("malformed_event")
    if not isinstance(ev, dict):
        raise Reject("malformed_event")
    ev_id = ev.get("id") if isinstance(ev.get("id"), str) and 1 <= len(ev.get("id")) <= 128 else None
    try:
        if ev.get("__duplicate__") in ("id", "app", "environment", "token", "payload", "expiration", "priority",
                                       "truncate_alert", "push_type", "collapse_id", "apns_id"):
            raise Reject("malformed_event")
        if not isinstance(ev.get("id"), str) or not 1 <= len(ev["id"]) <= 128:
            raise Reject("malformed_event")
        if not isinstance(ev.get("app"), str) or not ev["app"]:
            raise Reject("malformed_event")
        if "environment" in ev and ev["environment"] not in ("production", "sandbox"):
            raise Reject("malformed_event")
        if not isinstance(ev.get("token"), str) or not isinstance(ev.get("payload"), dict):
            raise Reject("malformed_event")
        expiration = None
        if "expiration" in ev:
            x = ev["expiration"]
            if is_number(x):
                if x != int(x) or not 0 <= x <= 0xFFFFFFFF:
                    raise Reject("malformed_event")
                expiration = int(x)
            elif isinstance(x, str):
                expiration = parse_rfc3339(x)
                if expiration is None or not 0 <= expiration <= 0xFFFFFFFF:
                    raise Reject("malformed_event")
            else:
                raise Reject("malformed_event")
        if "truncate_alert" in ev and not isinstance(ev["truncate_alert"], bool):
            raise Reject("malformed_event")
        if "push_type" in ev and ev["push_type"] not in PUSH_TYPES:
            raise Reject("malformed_event")
        if "collapse_id" in ev and not (isinstance(ev["collapse_id"], str) and len(ev["collapse_id"].encode("utf-8", "surrogatepass")) <= 64):
            raise Reject("malformed_event")
        if "apns_id" in ev and not (isinstance(ev["apns_id"], str) and UUID_TEXT.fullmatch(ev["apns_id"])):
            raise Reject("malformed_event")
        token = parse_token(ev["token"])
        if token is None:
            raise Reject("invalid_token_format")
        payload = ev["payload"]
        http2 = fmt == "http2"
        if payload.get("__duplicate__") == "aps" or "aps" not in payload or not check_aps(payload["aps"], http2):
            raise Reject("invalid_payload")
        aps = payload["aps"]
        live_activity = http2 and ev.get("push_type") == "liveactivity"
        if live_activity and not live_activity_complete(aps):
            raise Reject("invalid_payload")
        content_only = list(aps.keys()) == ["content-available"]
        # http2: the push type decides what is a background notification; absent, content-available only does
        background = ev["push_type"] == "background" if http2 and "push_type" in ev else content_only
        if "priority" in ev:
            p = ev["priority"]
            if not is_number(p) or p not in (1, 5, 10) or (p == 1 and not (http2 and not live_activity)):
                raise Reject("invalid_priority")
            priority = int(p)
        else:
            priority = 5 if background or content_only else 10
        if content_only and priority == 10:
            raise Reject("invalid_priority")
        if http2 and background and priority == 10:
            raise Reject("invalid_priority")
        background = content_only
        if background and fmt not in ("frame", "http2"):
            # the legacy formats carry no priority: the gateway takes 10
            raise Reject("invalid_priority")
        p_start, p_end = members(text, skip_ws(text, 0))["payload"]
        payload_text = text[p_start:p_end]
        data = compact(payload_text).encode()
        if len(data) > limit:
            alert_span = None
            if ev.get("truncate_alert") is True and "alert" in aps:
                aps_start, aps_end = members(payload_text, 0)["aps"]
                a_start, a_end = members(payload_text, aps_start)["alert"]
                if payload_text[a_start] == '"':
                    alert_span = (a_start, a_end)
                elif "body" in aps["alert"]:
                    alert_span = members(payload_text, a_start)["body"]
            shortened = truncate(payload_text, alert_span, limit) if alert_span else None
            if shortened is None:
                raise Reject("payload_too_large")
            data = shortened.encode()
        if http2:
            return ev_id, (token, data, expiration, priority, ev)
        return ev_id, (token, data, expiration, priority)
    except Reject as r:
        r.event_id = ev_id
        raise


PUSH_TYPES = {"alert": "", "background": "", "location": ".location-query", "voip": ".voip",
              "complication": ".complication", "fileprovider": ".pushkit.fileprovider", "mdm": None,
              "liveactivity": ".push-type.liveactivity", "pushtotalk": ".voip-ptt", "widgets": ".push-type.widgets"}
UUID_TEXT = re.compile(r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")
APNS_ID_NAMESPACE = uuid.UUID("5e1f3c52-8a7d-4b36-9d0e-2f6a41c7b9e3")


def http2_request(ev, token, payload, expiration, priority, mdm_topic):
    """The request of SPEC section 9 as an ordered dict, or None when an mdm push has no topic."""
    aps = ev["payload"]["aps"]
    push_type = ev.get("push_type") or ("background" if list(aps.keys()) == ["content-available"] else "alert")
    if push_type == "mdm":
        if mdm_topic is None:
            return None
        topic = mdm_topic
    else:
        topic = ev["app"] + PUSH_TYPES[push_type]
    apns_id = ev["apns_id"].lower() if "apns_id" in ev else str(uuid.uuid5(APNS_ID_NAMESPACE, ev["app"] + "\x00" + ev["id"]))
    headers = {"apns-topic": topic, "apns-push-type": push_type, "apns-priority": str(priority),
               "apns-expiration": str(expiration), "apns-id": apns_id}
    if "collapse_id" in ev:
        headers["apns-collapse-id"] = ev["collapse_id"]
    return {"path": "/3/device/" + token.hex(), "headers": headers, "body": payload.decode("utf-8")}


def encode(fmt, token, payload, identifier, expiration, priority):
    if fmt == "frame":
        items = (struct.pack(">BH", 1, len(token)) + token + struct.pack(">BH", 2, len(payload)) + payload
                 + struct.pack(">BHI", 3, 4, identifier) + struct.pack(">BHI", 4, 4, expiration)
                 + struct.pack(">BHB", 5, 1, priority))
        return struct.pack(">BI", 2, len(items)) + items
    if fmt == "enhanced":
        return struct.pack(">BIIH", 1, identifier, expiration, len(token)) + token + struct.pack(">H", len(payload)) + payload
    return struct.pack(">BH", 0, len(token)) + token + struct.pack(">H", len(payload)) + payload


def http2_limit(line):
    """The payload limit of the event's push type: 5120 for voip, else 4096."""
    try:
        ev = json.loads(line.decode("utf-8"))
        return 5120 if isinstance(ev, dict) and ev.get("push_type") == "voip" else 4096
    except (UnicodeDecodeError, ValueError):
        return 4096


def printable(event_id):
    if event_id is None:
        return "-"
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in event_id) or event_id.startswith('"') or event_id == "-":
        return json.dumps(event_id, ensure_ascii=False)
    return event_id


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--format", default="frame")
    ap.add_argument("--now", type=int, required=True)
    ap.add_argument("--identifier-start", type=int, default=1)
    ap.add_argument("--default-ttl", type=int, default=86400)
    ap.add_argument("--topic")
    args = ap.parse_args()
    limit = 2048 if args.format == "frame" else 256
    identifier = args.identifier_start
    out = []
    with open(args.file, "rb") as f:
        for line in f.read().split(b"\n"):
            if not line.strip(b" \t\r"):
                continue
            try:
                if args.format == "http2":
                    ev_id, (token, payload, expiration, priority, ev) = decode_event(line, http2_limit(line), "http2")
                    if expiration is None:
                        expiration = min(max(1, args.now + args.default_ttl), 0xFFFFFFFF)
                    request = http2_request(ev, token, payload, expiration, priority, args.topic)
                    if expiration != 0 and expiration < args.now:
                        out.append(f"{printable(ev_id)} error:expired")
                    elif request is None:
                        out.append(f"{printable(ev_id)} error:rejected")
                    else:
                        out.append(f"{printable(ev_id)} {json.dumps(request, ensure_ascii=False)}")
                    identifier = (identifier + 1) & 0xFFFFFFFF
                    continue
                ev_id, (token, payload, expiration, priority) = decode_event(line, limit, args.format)
                if expiration is None:
                    expiration = min(max(1, args.now + args.default_ttl), 0xFFFFFFFF)
                if expiration != 0 and expiration < args.now:
                    out.append(f"{printable(ev_id)} error:expired")
                else:
                    frame = encode(args.format, token, payload, identifier, expiration, priority)
                    out.append(f"{printable(ev_id)} {frame.hex()}")
            except Reject as r:
                out.append(f"{printable(getattr(r, 'event_id', None))} error:{r.reason}")
            identifier = (identifier + 1) & 0xFFFFFFFF
    sys.stdout.write("".join(line + "\n" for line in out))


if __name__ == "__main__":
    main()
