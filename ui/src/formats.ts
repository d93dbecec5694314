// Trace files: download a trace as OTLP JSON or as Jaeger's JSON (what Jaeger's query API
// returns and Jaeger UI downloads: {"data":[{traceID, spans, processes}]}), and read either back.
// Opened files stay in this tab's memory (`localTraces`): nothing is sent to the server.

import { AnyValue, KeyValue, OtlpSpan, ResourceSpans, TraceResponse, TraceResult, getTrace } from './api';
import { KIND_NAMES, Trace, relNs } from './model';

/** Traces opened from a file in this tab, by trace ID, with the file's name. */
export const localTraces = new Map<string, { data: TraceResponse; file: string }>();

/** A trace opened from a file in this tab, else the one weft stores. */
export function loadTrace(id: string, signal?: AbortSignal): Promise<TraceResult & { file: string | null }> {
  const local = localTraces.get(id);
  if (local) return Promise.resolve({ data: local.data, truncated: false, message: '', file: local.file });
  return getTrace(id, signal).then((r) => ({ ...r, file: null }));
}

// --- OTLP JSON ---------------------------------------------------------------------------------

/** The trace as an OTLP JSON export request (`{"resourceSpans":[...]}`), as an OTLP/HTTP JSON
 * exporter sends it and `weft`'s `/v1/traces` receives it. */
export function toOtlpJson(data: TraceResponse): string {
  return JSON.stringify({ resourceSpans: data.trace?.resourceSpans || [] });
}

// --- Jaeger JSON -------------------------------------------------------------------------------

interface JaegerTag {
  key: string;
  type: string;
  value: string | number | boolean;
}
interface JaegerSpan {
  traceID: string;
  spanID: string;
  operationName: string;
  references?: { refType: string; traceID: string; spanID: string }[];
  flags?: number;
  startTime: number;
  duration: number;
  tags?: JaegerTag[];
  logs?: { timestamp: number; fields?: JaegerTag[] }[];
  processID: string;
  /** Jaeger UI's own trace objects carry the process in the span */
  process?: { serviceName: string; tags?: JaegerTag[] };
  warnings?: string[] | null;
}
interface JaegerTrace {
  traceID: string;
  spans: JaegerSpan[];
  processes: Record<string, { serviceName: string; tags?: JaegerTag[] }>;
  warnings?: string[] | null;
}

function jaegerTag(kv: KeyValue): JaegerTag {
  const v = kv.value || {};
  if (v.boolValue !== undefined) return { key: kv.key, type: 'bool', value: v.boolValue };
  if (v.intValue !== undefined) return { key: kv.key, type: 'int64', value: Number(v.intValue) };
  if (v.doubleValue !== undefined) return { key: kv.key, type: 'float64', value: Number(v.doubleValue) };
  if (v.bytesValue !== undefined) return { key: kv.key, type: 'binary', value: v.bytesValue };
  if (v.arrayValue || v.kvlistValue) return { key: kv.key, type: 'string', value: JSON.stringify(v) };
  return { key: kv.key, type: 'string', value: v.stringValue ?? '' };
}

/** Microseconds (Jaeger's unit) of the ns since the trace start `rel`, from the trace's epoch base. */
function micros(t: Trace, relNsValue: number): number {
  // seconds × 1e6 stays exact in a double; nanoseconds × 1e9 would not
  return t.baseSec * 1e6 + Math.round((t.offsetNs + relNsValue) / 1e3);
}

/** The trace in Jaeger's JSON: times in µs, kind and status as the tags Jaeger's OTLP
 * translator writes (`span.kind`, `otel.status_code`, `otel.status_description`, `error`). */
export function toJaegerJson(t: Trace): string {
  const processes: JaegerTrace['processes'] = {};
  const pid = t.resources.map((attrs, i) => {
    const id = `p${i + 1}`;
    let serviceName = 'unknown_service';
    const tags: JaegerTag[] = [];
    for (const kv of attrs) {
      if (kv.key === 'service.name') serviceName = String(kv.value?.stringValue ?? serviceName);
      else tags.push(jaegerTag(kv));
    }
    processes[id] = { serviceName, tags };
    return id;
  });
  const spans: JaegerSpan[] = t.spans.map((sp) => {
    const tags = sp.attrs.map(jaegerTag);
    if (sp.kind > 1) tags.push({ key: 'span.kind', type: 'string', value: KIND_NAMES[sp.kind] });
    if (sp.statusCode === 2) {
      tags.push({ key: 'otel.status_code', type: 'string', value: 'ERROR' }, { key: 'error', type: 'bool', value: true });
      if (sp.statusMessage) tags.push({ key: 'otel.status_description', type: 'string', value: sp.statusMessage });
    } else if (sp.statusCode === 1) tags.push({ key: 'otel.status_code', type: 'string', value: 'OK' });
    if (sp.scope?.name) tags.push({ key: 'otel.scope.name', type: 'string', value: sp.scope.name });
    if (sp.scope?.version) tags.push({ key: 'otel.scope.version', type: 'string', value: sp.scope.version });
    const references: NonNullable<JaegerSpan['references']> = [];
    if (sp.parentId && !/^0+$/.test(sp.parentId)) references.push({ refType: 'CHILD_OF', traceID: t.id, spanID: sp.parentId });
    for (const l of sp.links) references.push({ refType: 'FOLLOWS_FROM', traceID: (l.traceId || '').toLowerCase(), spanID: (l.spanId || '').toLowerCase() });
    const start = micros(t, sp.start);
    return {
      traceID: t.id,
      spanID: sp.id,
      operationName: sp.name,
      references,
      flags: 1,
      startTime: start,
      duration: micros(t, sp.start + sp.dur) - start,
      tags,
      logs: sp.events.map((e) => ({
        timestamp: micros(t, relNs(t, e.timeUnixNano)),
        fields: [{ key: 'event', type: 'string', value: e.name || '' }, ...(e.attributes || []).map(jaegerTag)],
      })),
      processID: pid[sp.resource] || 'p1',
      warnings: null,
    };
  });
  return JSON.stringify({ data: [{ traceID: t.id, spans, processes, warnings: null }], total: 0, limit: 0, offset: 0, errors: null });
}

function anyValue(tag: JaegerTag): AnyValue {
  switch ((tag.type || 'string').toLowerCase()) {
    case 'bool':
      return { boolValue: tag.value === true || tag.value === 'true' };
    case 'int64':
      return { intValue: String(tag.value) };
    case 'float64':
      return { doubleValue: Number(tag.value) };
    case 'binary':
      return { bytesValue: String(tag.value) };
    default:
      return { stringValue: String(tag.value) };
  }
}

const usToNs = (us: number): string => (BigInt(Math.round(us)) * 1000n).toString();

/** A Jaeger trace as OTLP JSON (the reverse of toJaegerJson). */
function fromJaeger(jt: JaegerTrace): TraceResponse {
  const byProcess = new Map<string, OtlpSpan[]>();
  const processes = { ...(jt.processes || {}) };
  for (const s of jt.spans || []) {
    if (s.process && !processes[s.processID]) {
      s.processID ||= `inline:${s.process.serviceName}`;
      processes[s.processID] = s.process;
    }
    const refs = s.references || [];
    const parentRef = refs.find((r) => r.refType === 'CHILD_OF') || refs.find((r) => r.traceID === (s.traceID || jt.traceID));
    let kind = 0;
    let status: OtlpSpan['status'];
    const attributes: KeyValue[] = [];
    for (const tag of s.tags || []) {
      if (tag.key === 'span.kind') {
        const k = KIND_NAMES.indexOf(String(tag.value).toLowerCase());
        kind = k > 0 ? k : 0;
      } else if (tag.key === 'otel.status_code') status = { ...status, code: tag.value === 'ERROR' ? 2 : tag.value === 'OK' ? 1 : 0 };
      else if (tag.key === 'otel.status_description') status = { ...status, message: String(tag.value) };
      else if (tag.key === 'error' && (tag.value === true || tag.value === 'true')) status = { code: 2, ...status };
      else if (tag.key === 'otel.scope.name' || tag.key === 'otel.scope.version') continue;
      else attributes.push({ key: tag.key, value: anyValue(tag) });
    }
    if (kind === 0) kind = 1; // Jaeger has no unspecified kind: internal
    const span: OtlpSpan = {
      traceId: s.traceID || jt.traceID,
      spanId: s.spanID,
      parentSpanId: parentRef ? parentRef.spanID : '',
      name: s.operationName,
      kind,
      startTimeUnixNano: usToNs(s.startTime),
      endTimeUnixNano: usToNs(s.startTime + s.duration),
      attributes,
      events: (s.logs || []).map((l) => {
        const fields = l.fields || [];
        const name = fields.find((f) => f.key === 'event');
        return {
          timeUnixNano: usToNs(l.timestamp),
          name: name ? String(name.value) : 'log',
          attributes: fields.filter((f) => f !== name).map((f) => ({ key: f.key, value: anyValue(f) })),
        };
      }),
      links: refs.filter((r) => r !== parentRef).map((r) => ({ traceId: r.traceID, spanId: r.spanID })),
      status,
    };
    const list = byProcess.get(s.processID);
    if (list) list.push(span);
    else byProcess.set(s.processID, [span]);
  }
  const resourceSpans: ResourceSpans[] = [];
  for (const [pid, spans] of byProcess) {
    const p = processes[pid];
    const attributes: KeyValue[] = [{ key: 'service.name', value: { stringValue: p?.serviceName || 'unknown_service' } }];
    for (const tag of p?.tags || []) attributes.push({ key: tag.key, value: anyValue(tag) });
    resourceSpans.push({ resource: { attributes }, scopeSpans: [{ spans }] });
  }
  return { trace: { resourceSpans } };
}

/** The traces in a file of OTLP JSON (an export request, Tempo's `{"trace":…}` or `{"batches":…}`
 * response) or Jaeger JSON, by trace ID. Throws an Error that says what is wrong. */
export function parseTraceFile(text: string): Map<string, TraceResponse> {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    throw new Error(`The file is not JSON: ${(e as Error).message}`);
  }
  const out = new Map<string, TraceResponse>();
  const o = doc as { data?: JaegerTrace[]; resourceSpans?: ResourceSpans[]; batches?: ResourceSpans[]; trace?: { resourceSpans?: ResourceSpans[] } };
  if (o && Array.isArray(o.data)) {
    for (const jt of o.data) {
      if (!jt || !Array.isArray(jt.spans)) continue;
      const id = (jt.traceID || jt.spans[0]?.traceID || '').toLowerCase();
      if (id) out.set(id.padStart(32, '0'), fromJaeger(jt));
    }
  } else {
    const rss = o?.resourceSpans || o?.batches || o?.trace?.resourceSpans;
    if (!Array.isArray(rss)) throw new Error('Neither OTLP JSON (resourceSpans) nor Jaeger JSON (data[].spans) was found in the file.');
    // split by trace ID, keeping each resource and scope
    const split = new Map<string, ResourceSpans[]>();
    for (const rs of rss) {
      for (const ss of rs.scopeSpans || (rs as { instrumentationLibrarySpans?: ResourceSpans['scopeSpans'] }).instrumentationLibrarySpans || []) {
        const byTrace = new Map<string, OtlpSpan[]>();
        for (const s of ss.spans || []) {
          const id = normalizeId(s.traceId || '', 32);
          s.spanId = normalizeId(s.spanId || '', 16);
          if (s.parentSpanId) s.parentSpanId = normalizeId(s.parentSpanId, 16);
          const l = byTrace.get(id);
          if (l) l.push(s);
          else byTrace.set(id, [s]);
        }
        for (const [id, spans] of byTrace) {
          let list = split.get(id);
          if (!list) split.set(id, (list = []));
          list.push({ resource: rs.resource, scopeSpans: [{ scope: ss.scope, spans }] });
        }
      }
    }
    for (const [id, list] of split) out.set(id, { trace: { resourceSpans: list } });
  }
  if (!out.size) throw new Error('The file holds no spans.');
  return out;
}

/** Hex IDs stay; base64 IDs (protobuf-JSON's encoding of bytes) become hex. */
function normalizeId(id: string, hexLen: number): string {
  if (new RegExp(`^[0-9a-fA-F]{${hexLen}}$`).test(id)) return id.toLowerCase();
  try {
    const bin = atob(id);
    if (bin.length === hexLen / 2) return Array.from(bin, (c) => c.charCodeAt(0).toString(16).padStart(2, '0')).join('');
  } catch {
    // not base64
  }
  return id.toLowerCase();
}

/** Starts a download of `text` as `name`. */
export function download(name: string, text: string, type = 'application/json'): void {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}
