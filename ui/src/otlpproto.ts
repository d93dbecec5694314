// Decodes weft's protobuf trace response (Tempo's TraceByIDResponse: field 1 = Trace with
// repeated OTLP ResourceSpans, 3 = partial status, 4 = message) into the same objects the
// OTLP/JSON response parses to. The server sends the stored span bytes as they are ("marshal
// once"), which is about a third of the JSON's size and needs no JSON encoding on the server.
//
// Only the OTLP trace messages are decoded; unknown fields are skipped by wire type.

import type { AnyValue, KeyValue, OtlpEvent, OtlpLink, OtlpSpan, ResourceSpans, TraceResponse } from './api';

const utf8 = new TextDecoder();
const HEX: string[] = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

class Reader {
  pos: number;
  constructor(
    private buf: Uint8Array,
    start = 0,
    public end = buf.length,
  ) {
    this.pos = start;
  }

  done(): boolean {
    return this.pos >= this.end;
  }

  /** A varint as [low 32 bits, high 32 bits]. */
  varint64(): [number, number] {
    let lo = 0;
    let hi = 0;
    let shift = 0;
    const b = this.buf;
    for (; shift < 28; shift += 7) {
      const x = b[this.pos++];
      lo |= (x & 0x7f) << shift;
      if (x < 0x80) return [lo >>> 0, 0];
    }
    let x = b[this.pos++];
    lo |= (x & 0x0f) << 28;
    hi = (x & 0x7f) >> 4;
    if (x < 0x80) return [lo >>> 0, hi];
    for (shift = 3; shift < 32; shift += 7) {
      x = b[this.pos++];
      hi |= (x & 0x7f) << shift;
      if (x < 0x80) return [lo >>> 0, hi >>> 0];
    }
    if (this.pos > this.end) throw new Error('truncated protobuf varint');
    return [lo >>> 0, hi >>> 0];
  }

  uint32(): number {
    return this.varint64()[0];
  }

  tag(): [number, number] {
    const t = this.uint32();
    return [t >>> 3, t & 7];
  }

  bytes(): [number, number] {
    const len = this.uint32();
    const start = this.pos;
    this.pos += len;
    if (this.pos > this.end) throw new Error('truncated protobuf field');
    return [start, this.pos];
  }

  sub(): Reader {
    const [s, e] = this.bytes();
    return new Reader(this.buf, s, e);
  }

  string(): string {
    const [s, e] = this.bytes();
    return utf8.decode(this.buf.subarray(s, e));
  }

  hex(): string {
    const [s, e] = this.bytes();
    let out = '';
    for (let i = s; i < e; i++) out += HEX[this.buf[i]];
    return out;
  }

  /** A fixed64 as an unsigned decimal string (exact). */
  fixed64String(): string {
    const b = this.buf;
    const p = this.pos;
    const lo = (b[p] | (b[p + 1] << 8) | (b[p + 2] << 16) | (b[p + 3] << 24)) >>> 0;
    const hi = (b[p + 4] | (b[p + 5] << 8) | (b[p + 6] << 16) | (b[p + 7] << 24)) >>> 0;
    this.pos += 8;
    if (hi < 0x200000) return String(hi * 4294967296 + lo);
    return ((BigInt(hi) << 32n) | BigInt(lo)).toString();
  }

  double(): number {
    const v = new DataView(this.buf.buffer, this.buf.byteOffset + this.pos, 8).getFloat64(0, true);
    this.pos += 8;
    return v;
  }

  skip(wire: number): void {
    switch (wire) {
      case 0:
        this.varint64();
        break;
      case 1:
        this.pos += 8;
        break;
      case 2:
        this.bytes();
        break;
      case 5:
        this.pos += 4;
        break;
      default:
        throw new Error(`unsupported protobuf wire type ${wire}`);
    }
  }
}

function int64String([lo, hi]: [number, number]): string {
  if (hi === 0) return String(lo);
  return BigInt.asIntN(64, (BigInt(hi) << 32n) | BigInt(lo)).toString();
}

function bytesBase64(r: Reader, buf: Uint8Array): string {
  const [s, e] = r.bytes();
  let bin = '';
  for (let i = s; i < e; i++) bin += String.fromCharCode(buf[i]);
  return btoa(bin);
}

function anyValue(r: Reader, buf: Uint8Array): AnyValue {
  const v: AnyValue = {};
  while (!r.done()) {
    const [f, w] = r.tag();
    if (f === 1 && w === 2) v.stringValue = r.string();
    else if (f === 2 && w === 0) v.boolValue = r.uint32() !== 0;
    else if (f === 3 && w === 0) v.intValue = int64String(r.varint64());
    else if (f === 4 && w === 1) v.doubleValue = r.double();
    else if (f === 5 && w === 2) v.arrayValue = { values: repeated(r.sub(), 1, (x) => anyValue(x, buf)) };
    else if (f === 6 && w === 2) v.kvlistValue = { values: repeated(r.sub(), 1, (x) => keyValue(x, buf)) };
    else if (f === 7 && w === 2) v.bytesValue = bytesBase64(r, buf);
    else r.skip(w);
  }
  return v;
}

function keyValue(r: Reader, buf: Uint8Array): KeyValue {
  const kv: KeyValue = { key: '' };
  while (!r.done()) {
    const [f, w] = r.tag();
    if (f === 1 && w === 2) kv.key = r.string();
    else if (f === 2 && w === 2) kv.value = anyValue(r.sub(), buf);
    else r.skip(w);
  }
  return kv;
}

/** The embedded messages of field `field` of `r`, decoded by `one`. */
function repeated<T>(r: Reader, field: number, one: (r: Reader) => T): T[] {
  const out: T[] = [];
  while (!r.done()) {
    const [f, w] = r.tag();
    if (f === field && w === 2) out.push(one(r.sub()));
    else r.skip(w);
  }
  return out;
}

function event(r: Reader, buf: Uint8Array): OtlpEvent {
  const e: OtlpEvent = {};
  const attrs: KeyValue[] = [];
  while (!r.done()) {
    const [f, w] = r.tag();
    if (f === 1 && w === 1) e.timeUnixNano = r.fixed64String();
    else if (f === 2 && w === 2) e.name = r.string();
    else if (f === 3 && w === 2) attrs.push(keyValue(r.sub(), buf));
    else r.skip(w);
  }
  e.attributes = attrs;
  return e;
}

function link(r: Reader, buf: Uint8Array): OtlpLink {
  const l: OtlpLink = {};
  const attrs: KeyValue[] = [];
  while (!r.done()) {
    const [f, w] = r.tag();
    if (f === 1 && w === 2) l.traceId = r.hex();
    else if (f === 2 && w === 2) l.spanId = r.hex();
    else if (f === 4 && w === 2) attrs.push(keyValue(r.sub(), buf));
    else r.skip(w);
  }
  l.attributes = attrs;
  return l;
}

function span(r: Reader, buf: Uint8Array): OtlpSpan {
  const s: OtlpSpan = { spanId: '' };
  const attrs: KeyValue[] = [];
  const events: OtlpEvent[] = [];
  const links: OtlpLink[] = [];
  while (!r.done()) {
    const [f, w] = r.tag();
    switch (f) {
      case 1:
        s.traceId = r.hex();
        break;
      case 2:
        s.spanId = r.hex();
        break;
      case 4:
        s.parentSpanId = r.hex();
        break;
      case 5:
        s.name = r.string();
        break;
      case 6:
        s.kind = r.uint32();
        break;
      case 7:
        s.startTimeUnixNano = r.fixed64String();
        break;
      case 8:
        s.endTimeUnixNano = r.fixed64String();
        break;
      case 9:
        attrs.push(keyValue(r.sub(), buf));
        break;
      case 11:
        events.push(event(r.sub(), buf));
        break;
      case 13:
        links.push(link(r.sub(), buf));
        break;
      case 15: {
        const st: { code?: number; message?: string } = {};
        const x = r.sub();
        while (!x.done()) {
          const [g, v] = x.tag();
          if (g === 2 && v === 2) st.message = x.string();
          else if (g === 3 && v === 0) st.code = x.uint32();
          else x.skip(v);
        }
        s.status = st;
        break;
      }
      default:
        r.skip(w);
    }
  }
  s.attributes = attrs;
  s.events = events;
  s.links = links;
  return s;
}

function resourceSpans(r: Reader, buf: Uint8Array): ResourceSpans {
  const rs: ResourceSpans = { scopeSpans: [] };
  while (!r.done()) {
    const [f, w] = r.tag();
    if (f === 1 && w === 2) {
      rs.resource = { attributes: repeated(r.sub(), 1, (x) => keyValue(x, buf)) };
    } else if (f === 2 && w === 2) {
      const x = r.sub();
      const ss: { scope?: { name?: string; version?: string; attributes?: KeyValue[] }; spans: OtlpSpan[] } = { spans: [] };
      while (!x.done()) {
        const [g, v] = x.tag();
        if (g === 1 && v === 2) {
          const sc = x.sub();
          const scope: { name?: string; version?: string; attributes: KeyValue[] } = { attributes: [] };
          while (!sc.done()) {
            const [h, u] = sc.tag();
            if (h === 1 && u === 2) scope.name = sc.string();
            else if (h === 2 && u === 2) scope.version = sc.string();
            else if (h === 3 && u === 2) scope.attributes.push(keyValue(sc.sub(), buf));
            else sc.skip(u);
          }
          ss.scope = scope;
        } else if (g === 2 && v === 2) ss.spans.push(span(x.sub(), buf));
        else x.skip(v);
      }
      rs.scopeSpans!.push(ss);
    } else r.skip(w);
  }
  return rs;
}

/** Decodes a TraceByIDResponse. Throws on malformed input. */
export function decodeTraceResponse(buf: Uint8Array): TraceResponse {
  const r = new Reader(buf);
  const out: TraceResponse = { trace: { resourceSpans: [] } };
  while (!r.done()) {
    const [f, w] = r.tag();
    if (f === 1 && w === 2) {
      for (const rs of repeated(r.sub(), 1, (x) => resourceSpans(x, buf))) out.trace!.resourceSpans!.push(rs);
    }
    else if (f === 3 && w === 0) out.status = r.uint32() === 1 ? 'PARTIAL' : 'COMPLETE';
    else if (f === 4 && w === 2) out.message = r.string();
    else r.skip(w);
  }
  return out;
}
