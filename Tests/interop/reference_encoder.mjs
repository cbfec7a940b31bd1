#!/usr/bin/env node
// A second independent implementation of `pushworker encode`, in JavaScript, written from SPEC sections 2, 3 and 6
// and the seeds. JSON values come from JSON.parse (with a duplicate-key check of its own), raw spans from a small
// scanner, graphemes from Intl.Segmenter. Used by test_encode_interop.py.
//
// usage: node reference_encoder.mjs FILE --format frame|enhanced|simple --now T [--identifier-start N] [--default-ttl S]
import { readFileSync } from "node:fs";

const WS = " \t\n\r";
class Reject extends Error {
  constructor(reason) { super(reason); this.reason = reason; this.eventId = null; }
}

// ---- raw spans --------------------------------------------------------------------------------------------------
const skipWs = (s, i) => { while (i < s.length && WS.includes(s[i])) i++; return i; };
function stringEnd(s, i) { i++; while (s[i] !== '"') i += s[i] === "\\" ? 2 : 1; return i + 1; }
function valueEnd(s, i) {
  const c = s[i];
  if (c === '"') return stringEnd(s, i);
  if (c === "{" || c === "[") {
    const close = c === "{" ? "}" : "]";
    i = skipWs(s, i + 1);
    if (s[i] === close) return i + 1;
    for (;;) {
      if (c === "{") { i = skipWs(s, stringEnd(s, i)); i = skipWs(s, i + 1); }
      i = skipWs(s, valueEnd(s, i));
      if (s[i] === close) return i + 1;
      i = skipWs(s, i + 1);
    }
  }
  let j = i;
  while (j < s.length && !(WS + ",]}").includes(s[j])) j++;
  return j;
}
function members(s, i) {
  const out = new Map();
  i = skipWs(s, i + 1);
  if (s[i] === "}") return out;
  for (;;) {
    const kEnd = stringEnd(s, i);
    const key = JSON.parse(s.slice(i, kEnd));
    i = skipWs(s, skipWs(s, kEnd) + 1);
    const vEnd = valueEnd(s, i);
    if (!out.has(key)) out.set(key, [i, vEnd]);
    i = skipWs(s, vEnd);
    if (s[i] === "}") return out;
    i = skipWs(s, i + 1);
  }
}
function compact(text) {
  let out = "", inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === "\\") { out += text.slice(i, i + 2); i++; continue; }
      if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (WS.includes(c)) continue;
    out += c;
  }
  return out;
}
// Keys of an object value in raw text, in order, with repeats (JSON.parse hides repeats).
function rawKeys(s, i) {
  const keys = [];
  i = skipWs(s, i + 1);
  if (s[i] === "}") return keys;
  for (;;) {
    const kEnd = stringEnd(s, i);
    keys.push(JSON.parse(s.slice(i, kEnd)));
    i = skipWs(s, skipWs(s, kEnd) + 1);
    i = skipWs(s, valueEnd(s, i));
    if (s[i] === "}") return keys;
    i = skipWs(s, i + 1);
  }
}
const hasDup = (keys, names) => names.some((n) => keys.filter((k) => k === n).length > 1);

// ---- validation -------------------------------------------------------------------------------------------------
const isNum = (v) => typeof v === "number";
const isObj = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const utf8Len = (s) => Buffer.byteLength(s, "utf8");

function parseRfc3339(text) {
  const m = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/.exec(text);
  if (!m) return null;
  const [y, mo, d, h, mi, sec] = m.slice(1, 7).map(Number);
  const dim = [31, (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0 ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
  if (mo < 1 || mo > 12 || d < 1 || d > dim[mo - 1] || h > 23 || mi > 59 || sec > 60) return null;
  let offset = 0;
  const tz = m[8];
  if (tz !== "Z" && tz !== "z") {
    const oh = Number(tz.slice(1, 3)), om = Number(tz.slice(4, 6));
    if (oh > 23 || om > 59) return null;
    offset = (oh * 3600 + om * 60) * (tz[0] === "+" ? 1 : -1);
  }
  return Date.UTC(y, mo - 1, d) / 1000 + h * 3600 + mi * 60 + sec - offset;
}
function parseToken(text) {
  let t = text.replace(/^ +| +$/g, "");
  if (t.startsWith("<") || t.endsWith(">")) {
    if (!(t.startsWith("<") && t.endsWith(">") && t.length >= 2)) return null;
    t = t.slice(1, -1);
  }
  const digits = t.replaceAll(" ", "");
  if (!/^[0-9A-Fa-f]*$/.test(digits) || digits.length % 2 || digits.length < 2 || digits.length > 200) return null;
  return Buffer.from(digits, "hex");
}
function checkAps(aps, apsText) {
  if (!isObj(aps)) return false;
  if (hasDup(rawKeys(apsText, 0), ["alert", "badge", "sound", "content-available", "category"])) return false;
  if ("alert" in aps) {
    const a = aps.alert;
    if (isObj(a)) {
      const alertText = apsText.slice(...members(apsText, 0).get("alert"));
      if (hasDup(rawKeys(alertText, 0), ["body", "title", "action-loc-key", "loc-key", "loc-args", "title-loc-key", "title-loc-args", "launch-image"])) return false;
      for (const k of ["body", "title", "loc-key", "title-loc-key", "launch-image"]) if (k in a && typeof a[k] !== "string") return false;
      if ("action-loc-key" in a && !(a["action-loc-key"] === null || typeof a["action-loc-key"] === "string")) return false;
      for (const k of ["loc-args", "title-loc-args"]) if (k in a && !(Array.isArray(a[k]) && a[k].every((x) => typeof x === "string"))) return false;
    } else if (typeof a !== "string") return false;
  }
  if ("badge" in aps && !(isNum(aps.badge) && aps.badge >= 0 && Number.isInteger(aps.badge))) return false;
  for (const k of ["sound", "category"]) if (k in aps && typeof aps[k] !== "string") return false;
  if ("content-available" in aps && aps["content-available"] !== 1) return false;
  return true;
}

// ---- truncation -------------------------------------------------------------------------------------------------
function rawScalars(raw) {
  const out = [];
  for (let i = 0; i < raw.length;) {
    if (raw[i] === "\\") {
      const e = raw[i + 1];
      if (e === "u") {
        const unit = parseInt(raw.slice(i + 2, i + 6), 16);
        if (unit >= 0xd800 && unit <= 0xdbff) {
          out.push([String.fromCharCode(unit, parseInt(raw.slice(i + 8, i + 12), 16)), i]);
          i += 12;
        } else { out.push([String.fromCharCode(unit), i]); i += 6; }
      } else {
        out.push([{ b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" }[e] ?? e, i]);
        i += 2;
      }
    } else {
      const cp = raw.codePointAt(i);
      const ch = String.fromCodePoint(cp);
      out.push([ch, i]);
      i += ch.length;
    }
  }
  return out;
}
function truncate(payloadText, [start, end], limit) {
  const head = compact(payloadText.slice(0, start)) + '"';
  const tail = '"' + compact(payloadText.slice(end));
  const raw = payloadText.slice(start + 1, end - 1);
  const budget = limit - utf8Len(head) - utf8Len(tail) - 3;
  if (budget < 0) return null;
  const scalars = rawScalars(raw);
  const offsets = [...scalars.map(([, o]) => o), raw.length];
  const text = scalars.map(([c]) => c).join("");
  let keep = "", count = 0;
  for (const { segment } of new Intl.Segmenter("en", { granularity: "grapheme" }).segment(text)) {
    count += [...segment].length;
    const candidate = raw.slice(0, offsets[count]);
    if (utf8Len(candidate) > budget) break;
    keep = candidate;
  }
  return head + keep + "…" + tail;
}

// ---- events -----------------------------------------------------------------------------------------------------
const FIELDS = ["id", "app", "environment", "token", "payload", "expiration", "priority", "truncate_alert"];
function decodeEvent(bytes, limit) {
  let text, ev;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    ev = JSON.parse(text);
  } catch { throw new Reject("malformed_event"); }
  if (!isObj(ev)) throw new Reject("malformed_event");
  const top = skipWs(text, 0);
  const idOk = typeof ev.id === "string" && [...ev.id].length >= 1 && [...ev.id].length <= 128;
  try {
    if (hasDup(rawKeys(text, top), FIELDS)) throw new Reject("malformed_event");
    if (!idOk) throw new Reject("malformed_event");
    if (typeof ev.app !== "string" || ev.app === "") throw new Reject("malformed_event");
    if ("environment" in ev && ev.environment !== "production" && ev.environment !== "sandbox") throw new Reject("malformed_event");
    if (typeof ev.token !== "string" || !isObj(ev.payload)) throw new Reject("malformed_event");
    let expiration = null;
    if ("expiration" in ev) {
      const x = ev.expiration;
      if (isNum(x)) {
        if (!Number.isInteger(x) || x < 0 || x > 0xffffffff) throw new Reject("malformed_event");
        expiration = x;
      } else if (typeof x === "string") {
        expiration = parseRfc3339(x);
        if (expiration === null || expiration < 0 || expiration > 0xffffffff) throw new Reject("malformed_event");
      } else throw new Reject("malformed_event");
    }
    if ("truncate_alert" in ev && typeof ev.truncate_alert !== "boolean") throw new Reject("malformed_event");
    const token = parseToken(ev.token);
    if (token === null) throw new Reject("invalid_token_format");
    const [pStart, pEnd] = members(text, top).get("payload");
    const payloadText = text.slice(pStart, pEnd);
    const payloadMembers = members(payloadText, 0);
    if (hasDup(rawKeys(payloadText, 0), ["aps"]) || !payloadMembers.has("aps")) throw new Reject("invalid_payload");
    const apsText = payloadText.slice(...payloadMembers.get("aps"));
    const aps = ev.payload.aps;
    if (!checkAps(aps, apsText)) throw new Reject("invalid_payload");
    const background = Object.keys(aps).length === 1 && "content-available" in aps && rawKeys(apsText, 0).length === 1;
    let priority;
    if ("priority" in ev) {
      if (ev.priority !== 5 && ev.priority !== 10) throw new Reject("invalid_priority");
      priority = ev.priority;
    } else priority = background ? 5 : 10;
    if (background && priority === 10) throw new Reject("invalid_priority");
    // the legacy formats carry no priority: the gateway takes 10
    if (background && format !== "frame") throw new Reject("invalid_priority");
    let data = Buffer.from(compact(payloadText), "utf8");
    if (data.length > limit) {
      let span = null;
      if (ev.truncate_alert === true && "alert" in aps) {
        const [aStart, aEnd] = members(payloadText, payloadMembers.get("aps")[0]).get("alert");
        if (payloadText[aStart] === '"') span = [aStart, aEnd];
        else if ("body" in aps.alert) span = members(payloadText, aStart).get("body");
      }
      const shortened = span ? truncate(payloadText, span, limit) : null;
      if (shortened === null) throw new Reject("payload_too_large");
      data = Buffer.from(shortened, "utf8");
    }
    return [idOk ? ev.id : null, token, data, expiration, priority];
  } catch (e) {
    if (e instanceof Reject) e.eventId = idOk ? ev.id : null;
    throw e;
  }
}

function encode(format, token, payload, identifier, expiration, priority) {
  const u8 = (v) => Buffer.from([v]);
  const u16 = (v) => { const b = Buffer.alloc(2); b.writeUInt16BE(v); return b; };
  const u32 = (v) => { const b = Buffer.alloc(4); b.writeUInt32BE(v); return b; };
  if (format === "frame") {
    const items = Buffer.concat([u8(1), u16(token.length), token, u8(2), u16(payload.length), payload,
      u8(3), u16(4), u32(identifier), u8(4), u16(4), u32(expiration), u8(5), u16(1), u8(priority)]);
    return Buffer.concat([u8(2), u32(items.length), items]);
  }
  if (format === "enhanced") return Buffer.concat([u8(1), u32(identifier), u32(expiration), u16(token.length), token, u16(payload.length), payload]);
  return Buffer.concat([u8(0), u16(token.length), token, u16(payload.length), payload]);
}
function printable(id) {
  if (id === null) return "-";
  if ([...id].some((c) => /\s/u.test(c) || c.codePointAt(0) < 0x20 || c.codePointAt(0) === 0x7f || c === "\u0085") || id.startsWith('"') || id === "-") return JSON.stringify(id);
  return id;
}

const args = process.argv.slice(2);
const opt = (name, dflt) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : dflt; };
const format = opt("--format", "frame");
const now = Number(opt("--now"));
const ttl = Number(opt("--default-ttl", "86400"));
let identifier = Number(opt("--identifier-start", "1"));
const limit = format === "frame" ? 2048 : 256;
const data = readFileSync(args[0]);
const lines = [];
let start = 0;
for (let i = 0; i <= data.length; i++) {
  if (i === data.length || data[i] === 0x0a) { lines.push(data.subarray(start, i)); start = i + 1; }
}
let out = "";
for (const line of lines) {
  if (line.every((b) => b === 0x20 || b === 0x09 || b === 0x0d)) continue;
  try {
    const [id, token, payload, exp, priority] = decodeEvent(line, limit);
    const expiration = exp === null ? Math.min(Math.max(1, now + ttl), 0xffffffff) : exp;
    if (expiration !== 0 && expiration < now) out += `${printable(id)} error:expired\n`;
    else out += `${printable(id)} ${encode(format, token, payload, identifier, expiration, priority).toString("hex")}\n`;
  } catch (e) {
    if (!(e instanceof Reject)) throw e;
    out += `${printable(e.eventId)} error:${e.reason}\n`;
  }
  identifier = (identifier + 1) >>> 0;
}
process.stdout.write(out);
