// Trace model: OTLP JSON → flat span array + tree in O(n) (plus sorting siblings by start).
//
// Timestamps are decimal nanosecond strings beyond 2^53, so they are split into seconds and
// nanoseconds and made relative to the trace's first second: relative values stay exact
// integers (for traces shorter than ~100 days).

import { KeyValue, OtlpEvent, OtlpLink, OtlpScope, TraceResponse, valueString } from './api';

export interface Span {
  idx: number;
  id: string;
  parentId: string;
  name: string;
  service: string;
  kind: number; // OTLP SpanKind 0..5
  /** ns since the trace start */
  start: number;
  /** ns */
  dur: number;
  /** epoch ms of the start, for display */
  startMs: number;
  statusCode: number; // 0 unset, 1 ok, 2 error
  statusMessage: string;
  attrs: KeyValue[];
  events: OtlpEvent[];
  links: OtlpLink[];
  resource: number; // index into Trace.resources
  scope: OtlpScope | undefined;
  /** parent index in the displayed tree, -1 for roots (including orphans) */
  parent: number;
  depth: number;
  children: number[] | null;
  error: boolean;
  /** the parent ID names a span not in the trace */
  orphan: boolean;
}

export interface Trace {
  id: string;
  spans: Span[];
  resources: KeyValue[][];
  /** span indices in display (pre-order DFS) order */
  order: Int32Array;
  /** position of each span in `order` */
  pos: Int32Array;
  /** size of each span's subtree, itself included */
  size: Int32Array;
  roots: number[];
  root: number; // the main root span index, -1 if no spans
  durationNs: number;
  startMs: number;
  services: Map<string, number>; // service → span count
  errorCount: number;
  maxDepth: number;
  orphanCount: number;
  byId: Map<string, number>;
  /** relative times: ns since trace start = (sec - baseSec) * 1e9 + ns - offsetNs */
  baseSec: number;
  offsetNs: number;
}

/** ns since the trace start of an absolute nanosecond timestamp (events). */
export function relNs(t: Trace, s: string | number | undefined): number {
  const [a, b] = splitNs(s);
  return (a - t.baseSec) * 1e9 + b - t.offsetNs;
}

const KINDS: Record<string, number> = {
  SPAN_KIND_UNSPECIFIED: 0,
  SPAN_KIND_INTERNAL: 1,
  SPAN_KIND_SERVER: 2,
  SPAN_KIND_CLIENT: 3,
  SPAN_KIND_PRODUCER: 4,
  SPAN_KIND_CONSUMER: 5,
};
export const KIND_NAMES = ['unspecified', 'internal', 'server', 'client', 'producer', 'consumer'];
export const STATUS_NAMES = ['unset', 'ok', 'error'];

function kindOf(k: number | string | undefined): number {
  if (typeof k === 'number') return k;
  if (!k) return 0;
  return KINDS[k] ?? (Number(k) || 0);
}
function statusOf(c: number | string | undefined): number {
  if (typeof c === 'number') return c;
  if (!c) return 0;
  if (c === 'STATUS_CODE_ERROR') return 2;
  if (c === 'STATUS_CODE_OK') return 1;
  return Number(c) || 0;
}

/** Split a nanosecond timestamp into [seconds, nanoseconds]. */
export function splitNs(s: string | number | undefined): [number, number] {
  if (s === undefined || s === null || s === '') return [0, 0];
  if (typeof s === 'number') {
    const sec = Math.floor(s / 1e9);
    return [sec, s - sec * 1e9];
  }
  if (s.length <= 9) return [0, Number(s)];
  return [Number(s.slice(0, -9)), Number(s.slice(-9))];
}

export function buildTrace(id: string, data: TraceResponse): Trace {
  const { spans, resources, raw, baseSec } = readSpans(data);
  const { minStart, maxEnd, startMs } = relativeTimes(spans, raw, baseSec);
  const { byId, roots, orphanCount } = linkTree(spans);
  const { order, pos, maxDepth, cycleOrphans } = preorder(spans, roots);
  const size = subtreeSizes(spans, order);
  const { services, errorCount } = countServices(spans);

  return {
    id,
    spans,
    resources,
    order,
    pos,
    size,
    roots,
    root: roots.length ? roots[0] : -1,
    durationNs: Math.max(0, maxEnd - minStart),
    startMs,
    services,
    errorCount,
    maxDepth,
    orphanCount: orphanCount + cycleOrphans,
    byId,
    baseSec,
    offsetNs: minStart,
  };
}

/** A span's start and end timestamps split into [seconds, nanoseconds]. */
interface RawTimes {
  ss: number;
  sn: number;
  es: number;
  en: number;
}

/** The response's spans, unlinked and with times still to set, their resources' attributes, their
 * raw timestamps, and the trace's first second (0 when there are no timestamps). */
function readSpans(data: TraceResponse): { spans: Span[]; resources: KeyValue[][]; raw: RawTimes[]; baseSec: number } {
  const spans: Span[] = [];
  const resources: KeyValue[][] = [];
  const raw: RawTimes[] = [];
  let baseSec = Infinity;

  for (const rs of data.trace?.resourceSpans || []) {
    const rattrs = rs.resource?.attributes || [];
    const ri = resources.length;
    resources.push(rattrs);
    let service = '';
    for (const kv of rattrs) if (kv.key === 'service.name') service = valueString(kv.value);
    if (!service) service = 'unknown_service';
    for (const ss of rs.scopeSpans || []) {
      for (const s of ss.spans || []) {
        const [a, b] = splitNs(s.startTimeUnixNano);
        const [c, d] = splitNs(s.endTimeUnixNano ?? s.startTimeUnixNano);
        if (a && a < baseSec) baseSec = a;
        raw.push({ ss: a, sn: b, es: c, en: d });
        const code = statusOf(s.status?.code);
        spans.push({
          idx: spans.length,
          id: (s.spanId || '').toLowerCase(),
          parentId: (s.parentSpanId || '').toLowerCase(),
          name: s.name || '',
          service,
          kind: kindOf(s.kind),
          start: 0,
          dur: 0,
          startMs: 0,
          statusCode: code,
          statusMessage: s.status?.message || '',
          attrs: s.attributes || [],
          events: s.events || [],
          links: s.links || [],
          resource: ri,
          scope: ss.scope,
          parent: -1,
          depth: 0,
          children: null,
          error: code === 2,
          orphan: false,
        });
      }
    }
  }
  if (!isFinite(baseSec)) baseSec = 0;
  return { spans, resources, raw, baseSec };
}

/** Sets each span's start (ns since the trace's first span started), duration and epoch-ms start
 * exactly; returns that first start and the last end (ns since `baseSec`) and its epoch ms. */
function relativeTimes(spans: Span[], raw: RawTimes[], baseSec: number): { minStart: number; maxEnd: number; startMs: number } {
  const n = spans.length;
  // Exact relative times.
  let minStart = Infinity;
  let maxEnd = -Infinity;
  for (let i = 0; i < n; i++) {
    const r = raw[i];
    const st = (r.ss - baseSec) * 1e9 + r.sn;
    let en = (r.es - baseSec) * 1e9 + r.en;
    if (en < st) en = st;
    spans[i].start = st;
    spans[i].dur = en - st;
    if (st < minStart) minStart = st;
    if (en > maxEnd) maxEnd = en;
  }
  if (!isFinite(minStart)) minStart = 0;
  if (!isFinite(maxEnd)) maxEnd = 0;
  const startMs = baseSec * 1e3 + minStart / 1e6;
  for (let i = 0; i < n; i++) {
    const sp = spans[i];
    sp.start -= minStart;
    sp.startMs = startMs + sp.start / 1e6;
  }
  return { minStart, maxEnd, startMs };
}

/** Links each span to its parent (children sorted by start); spans without a parent ID are roots,
 * and so are orphans (whose parent is not in the trace), after them. */
function linkTree(spans: Span[]): { byId: Map<string, number>; roots: number[]; orphanCount: number } {
  const n = spans.length;
  const byId = new Map<string, number>();
  for (let i = 0; i < n; i++) if (!byId.has(spans[i].id)) byId.set(spans[i].id, i);
  const roots: number[] = [];
  let orphanCount = 0;
  for (let i = 0; i < n; i++) {
    const sp = spans[i];
    if (!sp.parentId || /^0+$/.test(sp.parentId)) {
      roots.push(i);
      continue;
    }
    const p = byId.get(sp.parentId);
    if (p === undefined || p === i) {
      sp.orphan = true;
      orphanCount++;
      roots.push(i);
      continue;
    }
    sp.parent = p;
    const ps = spans[p];
    if (ps.children) ps.children.push(i);
    else ps.children = [i];
  }
  const byStart = (a: number, b: number) => spans[a].start - spans[b].start || (spans[b].dur - spans[a].dur);
  for (let i = 0; i < n; i++) {
    const c = spans[i].children;
    if (c && c.length > 1) c.sort(byStart);
  }
  // True roots (no parent ID) before orphans, each group by start time.
  roots.sort((a, b) => Number(spans[a].orphan) - Number(spans[b].orphan) || byStart(a, b));
  return { byId, roots, orphanCount };
}

/** The display order (pre-order from each root), each span's position in it and depth, and the
 * deepest depth; spans caught in a parent cycle are made orphan roots (appended to `roots`). */
function preorder(spans: Span[], roots: number[]): { order: Int32Array; pos: Int32Array; maxDepth: number; cycleOrphans: number } {
  const n = spans.length;
  // Pre-order DFS with an explicit stack (traces can be deep).
  const order = new Int32Array(n);
  const pos = new Int32Array(n);
  const visited = new Uint8Array(n);
  let k = 0;
  let maxDepth = 0;
  let cycleOrphans = 0;
  const stack: number[] = [];
  const walk = (r: number) => {
    stack.push(r);
    spans[r].depth = 0;
    while (stack.length) {
      const i = stack.pop()!;
      if (visited[i]) continue;
      visited[i] = 1;
      pos[i] = k;
      order[k++] = i;
      const sp = spans[i];
      if (sp.depth > maxDepth) maxDepth = sp.depth;
      const c = sp.children;
      if (c) {
        for (let j = c.length - 1; j >= 0; j--) {
          const ci = c[j];
          if (!visited[ci]) {
            spans[ci].depth = sp.depth + 1;
            stack.push(ci);
          }
        }
      }
    }
  };
  for (const r of roots) walk(r);
  // Spans caught in a parent cycle are unreachable from any root: show them as roots.
  if (k < n) {
    for (let i = 0; i < n; i++) {
      if (!visited[i]) {
        const sp = spans[i];
        if (sp.parent >= 0) {
          const pc = spans[sp.parent].children!;
          pc.splice(pc.indexOf(i), 1);
        }
        sp.parent = -1;
        sp.orphan = true;
        cycleOrphans++;
        roots.push(i);
        walk(i);
      }
    }
  }
  return { order, pos, maxDepth, cycleOrphans };
}

/** The size of each span's subtree, itself included, from the display order. */
function subtreeSizes(spans: Span[], order: Int32Array): Int32Array {
  const n = spans.length;
  const size = new Int32Array(n);
  for (let j = n - 1; j >= 0; j--) {
    const i = order[j];
    size[i] += 1;
    const p = spans[i].parent;
    if (p >= 0) size[p] += size[i];
  }
  return size;
}

/** Spans per service, and how many spans have status error. */
function countServices(spans: Span[]): { services: Map<string, number>; errorCount: number } {
  const services = new Map<string, number>();
  let errorCount = 0;
  for (let i = 0; i < spans.length; i++) {
    const sp = spans[i];
    services.set(sp.service, (services.get(sp.service) || 0) + 1);
    if (sp.error) errorCount++;
  }
  return { services, errorCount };
}

/** Rows to display: pre-order, skipping descendants of collapsed spans. */
export function visibleRows(t: Trace, collapsed: Uint8Array): Int32Array {
  const n = t.order.length;
  const out = new Int32Array(n);
  let m = 0;
  for (let k = 0; k < n; ) {
    const i = t.order[k];
    out[m++] = i;
    k += collapsed[i] ? t.size[i] : 1;
  }
  return out.subarray(0, m);
}

/** The critical path as the segments of spans actually on it, computed as Jaeger UI does
 * (`CriticalPath/index.tsx`): children are first clipped to their parent (a child entirely
 * outside its parent is dropped, with its subtree); then, from the root's end and walking back in
 * time, the path runs through the current span until the end of its last-finishing child that
 * ends before the current point, descends into that child, and, when a span has no such child
 * left, runs through it back to its start and returns to its parent at that start.
 *
 * O(n log n): each span's children are sorted by end once, and the point where a span is
 * re-entered only moves back, so one cursor per span finds the next child. */
export interface CriticalPath {
  /** segments, latest first: span index, start and end in ns since the trace start */
  segs: { span: number; start: number; end: number }[];
  /** each span's segments (indices into `segs`), for the spans on the path */
  bySpan: Map<number, number[]>;
  /** 1 for the spans with a segment on the path */
  mark: Uint8Array;
}

export function criticalPath(t: Trace): CriticalPath {
  const spans = t.spans;
  const n = spans.length;
  // Clip children to their (clipped) parent, top-down in display order.
  const cs = new Float64Array(n);
  const ce = new Float64Array(n);
  const kept = new Uint8Array(n);
  for (let k = 0; k < n; k++) {
    const i = t.order[k];
    const sp = spans[i];
    const s = sp.start;
    const e = sp.start + sp.dur;
    const p = sp.parent;
    if (p < 0) {
      cs[i] = s;
      ce[i] = e;
      kept[i] = 1;
      continue;
    }
    if (!kept[p]) continue;
    const ps = cs[p];
    const pe = ce[p];
    if (s >= ps && e <= pe) {
      cs[i] = s;
      ce[i] = e;
    } else if (s >= pe || e <= ps) {
      continue; // entirely outside its parent
    } else {
      cs[i] = Math.max(s, ps);
      ce[i] = Math.min(e, pe);
    }
    kept[i] = 1;
  }
  const kids: (number[] | null)[] = new Array(n).fill(null);
  const cursor = new Int32Array(n);
  const kidsOf = (i: number): number[] => {
    let k = kids[i];
    if (!k) {
      k = (spans[i].children || []).filter((c) => kept[c]);
      // latest end first; ties keep the start order
      k.sort((a, b) => ce[b] - ce[a]);
      kids[i] = k;
    }
    return k;
  };
  const segs: CriticalPath['segs'] = [];
  const bySpan = new Map<number, number[]>();
  const mark = new Uint8Array(n);
  const add = (i: number, start: number, end: number) => {
    if (start === end) return;
    const list = bySpan.get(i);
    if (list) list.push(segs.length);
    else bySpan.set(i, [segs.length]);
    segs.push({ span: i, start, end });
    mark[i] = 1;
  };
  for (const r of t.roots) {
    if (spans[r].orphan && r !== t.root) continue;
    let cur = r;
    let bound = ce[r];
    let returning = false;
    for (;;) {
      const k = kidsOf(cur);
      let c = cursor[cur];
      if (returning) while (c < k.length && ce[k[c]] >= bound) c++;
      cursor[cur] = c;
      if (c < k.length) {
        const lfc = k[c];
        add(cur, ce[lfc], bound);
        cur = lfc;
        bound = ce[lfc];
        returning = false;
      } else {
        add(cur, cs[cur], bound);
        const p = spans[cur].parent;
        if (p < 0) break;
        bound = cs[cur];
        cur = p;
        returning = true;
      }
    }
  }
  return { segs, bySpan, mark };
}

/** Each span's self time: its duration minus the time covered by its children (clipped to the
 * span; overlapping children count once). */
export function selfTimes(t: Trace): Float64Array {
  const spans = t.spans;
  const out = new Float64Array(spans.length);
  for (let i = 0; i < spans.length; i++) {
    const sp = spans[i];
    const s = sp.start;
    const e = sp.start + sp.dur;
    let covered = 0;
    const c = sp.children;
    if (c) {
      // children are sorted by start: merge their intervals
      let runS = -1;
      let runE = -1;
      for (const ci of c) {
        const k = spans[ci];
        const ks = Math.max(s, k.start);
        const ke = Math.min(e, k.start + k.dur);
        if (ke <= ks) continue;
        if (runE < 0 || ks > runE) {
          if (runE > runS) covered += runE - runS;
          runS = ks;
          runE = ke;
        } else if (ke > runE) runE = ke;
      }
      if (runE > runS) covered += runE - runS;
    }
    out[i] = sp.dur - covered;
  }
  return out;
}

/** Lower-cased text a span is found by: name, service, span ID, attribute keys and values. */
export function searchText(t: Trace, i: number): string {
  const sp = t.spans[i];
  let s = `${sp.name}\u0000${sp.service}\u0000${sp.id}\u0000${sp.statusMessage}`;
  for (const kv of sp.attrs) s += `\u0000${kv.key}=${valueString(kv.value)}`;
  return s.toLowerCase();
}
