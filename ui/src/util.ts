// Formatting, colours and time-range helpers shared by the pages.

/** Human duration from nanoseconds: 850 ns, 12.3 µs, 45.6 ms, 1.23 s, 2m 03s, 1h 02m. */
export function fmtDuration(ns: number): string {
  if (!isFinite(ns)) return '–';
  const a = Math.abs(ns);
  if (a < 1e3) return `${Math.round(ns)} ns`;
  if (a < 1e6) return `${trim(ns / 1e3)} µs`;
  if (a < 1e9) return `${trim(ns / 1e6)} ms`;
  if (a < 60e9) return `${trim(ns / 1e9)} s`;
  const s = Math.round(ns / 1e9);
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

function trim(v: number): string {
  // three significant digits, no trailing zeros: 1.23, 12.3, 123
  const a = Math.abs(v);
  const s = a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2);
  return s.includes('.') ? s.replace(/\.?0+$/, '') : s;
}

export function fmtMs(ms: number): string {
  return fmtDuration(ms * 1e6);
}

const pad2 = (n: number) => String(n).padStart(2, '0');

/** Local date-time, e.g. 2026-11-23 15:04:05.123 */
export function fmtDateTime(ms: number, withMs = true): string {
  const d = new Date(ms);
  const base = `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())} ${pad2(d.getHours())}:${pad2(d.getMinutes())}:${pad2(d.getSeconds())}`;
  return withMs ? `${base}.${String(d.getMilliseconds()).padStart(3, '0')}` : base;
}

export function fmtTime(ms: number): string {
  const d = new Date(ms);
  return `${pad2(d.getHours())}:${pad2(d.getMinutes())}:${pad2(d.getSeconds())}`;
}

/** "12 s ago", "5 min ago", "3 h ago", "2 d ago" */
export function fmtAgo(ms: number, now = Date.now()): string {
  const s = Math.round((now - ms) / 1000);
  if (s < 0) return 'in the future';
  if (s < 5) return 'just now';
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

export function fmtCount(n: number): string {
  return n.toLocaleString('en-US');
}

/** Nanosecond timestamps arrive as decimal strings (beyond 2^53). Milliseconds since the epoch,
 * good for display. */
export function nsStringToMs(s: string | number | undefined): number {
  if (s === undefined) return 0;
  if (typeof s === 'number') return s / 1e6;
  if (s.length <= 6) return Number(s) / 1e6;
  return Number(s.slice(0, -6)) + Number(s.slice(-6)) / 1e6;
}

// ---------------------------------------------------------------------------------------------
// Colours: a stable hash of the service name picks from a palette that reads well on light and
// dark backgrounds.

const PALETTE = [
  '#4e79a7', '#f28e2b', '#59a14f', '#b07aa1', '#76b7b2', '#edc948', '#ff9da7', '#9c755f',
  '#2f8fce', '#e15759', '#8cd17d', '#d37295', '#499894', '#f1ce63', '#a0cbe8', '#86bcb6',
  '#d4a6c8', '#b6992d', '#79706e',
];
// #e15759 reads as "error"; keep it out of rotation for services.
const SERVICE_PALETTE = PALETTE.filter((c) => c !== '#e15759');

export function hashString(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** A colour per service: a hash of its name picks a palette slot, so a service has the same
 * colour on every page and after every reload, whatever else the page shows. */
export function serviceColor(service: string): string {
  return SERVICE_PALETTE[hashString(service) % SERVICE_PALETTE.length];
}

// ---------------------------------------------------------------------------------------------
// Time ranges. In the URL either `range=15m` (relative, re-evaluated on every run) or
// `start=<unix s>&end=<unix s>` (absolute).

export const QUICK_RANGES: { key: string; label: string; seconds: number }[] = [
  { key: '5m', label: 'Last 5 minutes', seconds: 300 },
  { key: '15m', label: 'Last 15 minutes', seconds: 900 },
  { key: '1h', label: 'Last 1 hour', seconds: 3600 },
  { key: '6h', label: 'Last 6 hours', seconds: 6 * 3600 },
  { key: '24h', label: 'Last 24 hours', seconds: 24 * 3600 },
  { key: '7d', label: 'Last 7 days', seconds: 7 * 24 * 3600 },
];

export interface TimeRange {
  /** quick range key, or '' for an absolute range */
  range: string;
  start: number; // unix seconds
  end: number; // unix seconds
}

export function readTimeRange(p: URLSearchParams, defaultRange = '1h'): TimeRange {
  const start = Number(p.get('start'));
  const end = Number(p.get('end'));
  if (!p.get('range') && p.get('start') && p.get('end') && isFinite(start) && isFinite(end) && end > start) {
    return { range: '', start: Math.floor(start), end: Math.ceil(end) };
  }
  const key = p.get('range') || defaultRange;
  const q = QUICK_RANGES.find((r) => r.key === key) || QUICK_RANGES.find((r) => r.key === defaultRange)!;
  const now = Math.ceil(Date.now() / 1000);
  return { range: q.key, start: now - q.seconds, end: now };
}

export function writeTimeRange(p: URLSearchParams, t: TimeRange): void {
  p.delete('range');
  p.delete('start');
  p.delete('end');
  if (t.range) p.set('range', t.range);
  else {
    p.set('start', String(t.start));
    p.set('end', String(t.end));
  }
}

export function timeRangeLabel(t: TimeRange): string {
  if (t.range) return QUICK_RANGES.find((r) => r.key === t.range)?.label ?? t.range;
  return `${fmtDateTime(t.start * 1000, false)} → ${fmtDateTime(t.end * 1000, false)}`;
}

/** Parse "100ms", "1.5s", "2m", "250us", "500ns", "1h" into nanoseconds; NaN if invalid. */
export function parseDuration(s: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s|m|h)?\s*$/.exec(s);
  if (!m) return NaN;
  const v = Number(m[1]);
  const unit = m[2] || 'ms';
  const mult: Record<string, number> = { ns: 1, us: 1e3, 'µs': 1e3, ms: 1e6, s: 1e9, m: 60e9, h: 3600e9 };
  return v * mult[unit];
}

/** Nice tick values between lo and hi (linear). */
export function niceTicks(lo: number, hi: number, count: number): number[] {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / Math.max(1, count);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const norm = raw / mag;
  const step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  const out: number[] = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(v);
  return out;
}

/** Nice time-of-day ticks in ms between lo and hi. */
export function timeTicks(loMs: number, hiMs: number, count: number): number[] {
  const span = hiMs - loMs;
  const steps = [1e3, 2e3, 5e3, 10e3, 15e3, 30e3, 60e3, 120e3, 300e3, 600e3, 900e3, 1800e3, 3600e3, 7200e3, 3 * 3600e3, 6 * 3600e3, 12 * 3600e3, 86400e3];
  let step = steps[steps.length - 1];
  for (const s of steps) {
    if (span / s <= count) {
      step = s;
      break;
    }
  }
  const tz = new Date().getTimezoneOffset() * 60e3;
  const out: number[] = [];
  for (let v = Math.ceil((loMs - tz) / step) * step + tz; v <= hiMs; v += step) out.push(v);
  return out;
}

export function debounce<A extends unknown[]>(fn: (...a: A) => void, ms: number): (...a: A) => void {
  let t: number | undefined;
  return (...a: A) => {
    if (t !== undefined) clearTimeout(t);
    t = window.setTimeout(() => fn(...a), ms);
  };
}

/** "1 span", "2 spans", "1,234 calls". */
export function plural(n: number, word: string): string {
  return `${fmtCount(n)} ${word}${n === 1 ? '' : 's'}`;
}
