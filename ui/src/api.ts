// Client for weft's Tempo-compatible query API (same origin).

import { decodeTraceResponse } from './otlpproto';
import { authHeaders, authNeed, authRequired } from './tenant';

export class ApiError extends Error {
  constructor(
    public status: number,
    message: string,
  ) {
    super(message);
  }
}

export interface AnyValue {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number | string;
  boolValue?: boolean;
  bytesValue?: string;
  arrayValue?: { values?: AnyValue[] };
  kvlistValue?: { values?: KeyValue[] };
}
export interface KeyValue {
  key: string;
  value?: AnyValue;
}

export interface SearchSpan {
  spanID: string;
  name?: string;
  startTimeUnixNano?: string;
  durationNanos?: string;
  attributes?: KeyValue[];
}
export interface SpanSet {
  spans?: SearchSpan[];
  matched?: number;
}
export interface SearchTrace {
  traceID: string;
  rootServiceName?: string;
  rootTraceName?: string;
  startTimeUnixNano?: string;
  durationMs?: number;
  spanSet?: SpanSet;
  spanSets?: SpanSet[];
  /** Every span of the trace by service (Tempo's serviceStats; a zero errorCount is left out). */
  serviceStats?: Record<string, { spanCount?: number; errorCount?: number }>;
}
export interface SearchResponse {
  traces?: SearchTrace[];
  metrics?: Record<string, unknown>;
}

export interface OtlpEvent {
  timeUnixNano?: string;
  name?: string;
  attributes?: KeyValue[];
}
export interface OtlpLink {
  traceId?: string;
  spanId?: string;
  attributes?: KeyValue[];
}
export interface OtlpSpan {
  traceId?: string;
  spanId: string;
  parentSpanId?: string;
  name?: string;
  kind?: number | string;
  startTimeUnixNano?: string;
  endTimeUnixNano?: string;
  attributes?: KeyValue[];
  events?: OtlpEvent[];
  links?: OtlpLink[];
  status?: { code?: number | string; message?: string };
}
export interface OtlpScope {
  name?: string;
  version?: string;
  attributes?: KeyValue[];
}
export interface ResourceSpans {
  resource?: { attributes?: KeyValue[] };
  scopeSpans?: { scope?: OtlpScope; spans?: OtlpSpan[] }[];
}
export interface TraceResponse {
  trace?: { resourceSpans?: ResourceSpans[] };
  status?: string;
  message?: string;
}

export interface TagValue {
  type: string;
  value: string;
}

async function request(path: string, signal?: AbortSignal, accept = 'application/json'): Promise<Response> {
  let res: Response;
  try {
    res = await fetch(path, { signal, headers: { Accept: accept, ...authHeaders() } });
  } catch (e) {
    if ((e as Error).name === 'AbortError') throw e;
    throw new ApiError(0, `Could not reach the weft server (${(e as Error).message}).`);
  }
  if (!res.ok) {
    let text = '';
    try {
      text = (await res.text()).trim();
    } catch {
      text = '';
    }
    if (res.status === 401) authRequired(authNeed(text));
    throw new ApiError(res.status, text || `${res.status} ${res.statusText}`);
  }
  return res;
}

async function getJSON<T>(path: string, signal?: AbortSignal): Promise<T> {
  const res = await request(path, signal);
  return (await res.json()) as T;
}

function qs(params: Record<string, string | number | undefined | null>): string {
  const p = new URLSearchParams();
  for (const k in params) {
    const v = params[k];
    if (v !== undefined && v !== null && v !== '') p.set(k, String(v));
  }
  const s = p.toString();
  return s ? `?${s}` : '';
}

export interface SearchParams {
  q: string;
  limit?: number;
  start?: number;
  end?: number;
  minDuration?: string;
  maxDuration?: string;
  spss?: number;
}

export async function search(p: SearchParams, signal?: AbortSignal): Promise<SearchResponse> {
  const r = await getJSON<SearchResponse>(
    `/api/search${qs({ q: p.q, limit: p.limit, start: p.start, end: p.end, minDuration: p.minDuration, maxDuration: p.maxDuration, spss: p.spss })}`,
    signal,
  );
  // Tempo's search drops the leading zeros of trace IDs; the rest of the UI (links, URLs, the
  // trace page) uses the full 32 hex digits.
  for (const t of r.traces || []) {
    if (t.traceID && t.traceID.length < 32) t.traceID = t.traceID.padStart(32, '0');
  }
  return r;
}

export async function tagNames(scope: 'span' | 'resource' | 'intrinsic' | '', signal?: AbortSignal): Promise<Record<string, string[]>> {
  const r = await getJSON<{ scopes?: { name: string; tags?: string[] }[] }>(`/api/v2/search/tags${qs({ scope })}`, signal);
  const out: Record<string, string[]> = {};
  for (const s of r.scopes || []) out[s.name] = s.tags || [];
  return out;
}

export async function tagValues(
  tag: string,
  opts: { q?: string; start?: number; end?: number } = {},
  signal?: AbortSignal,
): Promise<TagValue[]> {
  const r = await getJSON<{ tagValues?: TagValue[] }>(
    `/api/v2/search/tag/${encodeURIComponent(tag)}/values${qs({ q: opts.q, start: opts.start, end: opts.end })}`,
    signal,
  );
  return r.tagValues || [];
}

export interface TraceResult {
  data: TraceResponse;
  truncated: boolean;
  message: string;
}

export async function getTrace(id: string, signal?: AbortSignal): Promise<TraceResult> {
  // Protobuf: the server sends the stored bytes without encoding JSON, a third of the size.
  const res = await request(`/api/v2/traces/${encodeURIComponent(id)}`, signal, 'application/protobuf');
  const data = (res.headers.get('content-type') || '').includes('protobuf')
    ? decodeTraceResponse(new Uint8Array(await res.arrayBuffer()))
    : ((await res.json()) as TraceResponse);
  const header = res.headers.get('x-weft-trace-truncated');
  const partial = (data.status || '').toUpperCase() === 'PARTIAL';
  const truncated = partial || (header !== null && header !== '' && header !== 'false' && header !== '0');
  return { data, truncated, message: data.message || '' };
}

/** Whether weft stores trace `id`: true, false (404, or not a trace ID), or null when it could
 * not be told (network or server error). A HEAD request: the server looks the trace up through
 * its index, and no span crosses the wire. */
export async function traceExists(id: string, signal?: AbortSignal): Promise<boolean | null> {
  try {
    const res = await fetch(`/api/v2/traces/${encodeURIComponent(id)}`, { method: 'HEAD', signal, headers: authHeaders() });
    if (res.ok) return true;
    return res.status === 404 || res.status === 400 ? false : null;
  } catch {
    return null;
  }
}

export interface GraphService {
  name: string;
  spanCount: number;
  errorCount: number;
  rootCount: number;
}
export interface GraphEdge {
  parent: string;
  child: string;
  callCount: number;
  errorCount: number;
  latencyP50Nano: string;
  latencyP90Nano: string;
  latencyP99Nano: string;
}
export interface ServiceGraphResponse {
  services: GraphService[];
  edges: GraphEdge[];
  /** false when the server's span budget ran out before the whole range was read */
  complete: boolean;
  /** with complete=false: start (Unix ns) of the oldest span counted */
  countedFrom?: string;
  /** calls of traces split across storage whose caller span was not looked up (rare) */
  unresolvedCalls?: number;
  metrics?: { inspectedTraces?: number; inspectedSpans?: string };
}

/** Calls between services over a time range, counted by the server from every trace in it. */
export async function serviceGraph(p: { q?: string; start: number; end: number }, signal?: AbortSignal): Promise<ServiceGraphResponse> {
  return getJSON<ServiceGraphResponse>(`/api/service-graph${qs({ q: p.q, start: p.start, end: p.end })}`, signal);
}

/** Display string for an OTLP AnyValue. */
export function valueString(v: AnyValue | undefined): string {
  if (!v) return '';
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return String(v.intValue);
  if (v.doubleValue !== undefined) return String(v.doubleValue);
  if (v.boolValue !== undefined) return v.boolValue ? 'true' : 'false';
  if (v.bytesValue !== undefined) return v.bytesValue;
  if (v.arrayValue) return `[${(v.arrayValue.values || []).map(valueString).join(', ')}]`;
  if (v.kvlistValue) return `{${(v.kvlistValue.values || []).map((kv) => `${kv.key}: ${valueString(kv.value)}`).join(', ')}}`;
  return '';
}

/** Whether weft holds any trace at all (any time): tells "no data yet" from "no match". */
export async function hasAnyData(signal?: AbortSignal): Promise<boolean> {
  try {
    const r = await search({ q: '{}', limit: 1, spss: 1 }, signal);
    if ((r.traces || []).length) return true;
    return (await tagValues('resource.service.name', {}, signal)).length > 0;
  } catch {
    return true; // unknown: assume data, show the ordinary "no match" state
  }
}

export interface SamplingOperation {
  service: string;
  operation: string;
  rootSpansPerSecond: number;
  probability: number;
  sampledTracesPerSecond: number;
}

export interface SamplingResponse {
  mode: 'adaptive' | 'file';
  file?: string;
  intervalSeconds?: number;
  targetTracesPerSecond?: number;
  initialProbability?: number;
  lowerBoundTracesPerSecond?: number;
  operations: SamplingOperation[];
}

/** What adaptive sampling serves Jaeger remote samplers, per service and operation. */
export async function samplingOperations(signal?: AbortSignal): Promise<SamplingResponse> {
  return getJSON<SamplingResponse>('/api/sampling/operations', signal);
}

export interface MetricsSample {
  timestampMs: string;
  value: number;
}
export interface MetricsExemplar {
  labels?: KeyValue[];
  value: number;
  timestampMs: string;
}
export interface MetricsSeries {
  labels?: KeyValue[];
  samples?: MetricsSample[];
  exemplars?: MetricsExemplar[];
}
export interface MetricsRangeResponse {
  series?: MetricsSeries[];
}
export interface MetricsInstantResponse {
  series?: { labels?: KeyValue[]; value: number }[];
}

/** A TraceQL metrics query over a range (`/api/metrics/query_range`): one sample per step that
 * has a value, and exemplars (`trace:id`, `span:id`). Times in Unix seconds, step in seconds. */
export async function metricsRange(p: { q: string; start: number; end: number; step: number; exemplars?: number }, signal?: AbortSignal): Promise<MetricsRangeResponse> {
  return getJSON<MetricsRangeResponse>(`/api/metrics/query_range${qs({ q: p.q, start: p.start, end: p.end, step: `${p.step}s`, exemplars: p.exemplars })}`, signal);
}

/** A TraceQL metrics query as one value over the whole range (`/api/metrics/query`). */
export async function metricsInstant(p: { q: string; start: number; end: number }, signal?: AbortSignal): Promise<MetricsInstantResponse> {
  return getJSON<MetricsInstantResponse>(`/api/metrics/query${qs({ q: p.q, start: p.start, end: p.end })}`, signal);
}
