// Monitor: the RED view (rate, errors, duration) as Jaeger's Monitor tab shows it. Every number
// is computed by the server from TraceQL metrics (/api/metrics/query_range and
// /api/metrics/query); the page never aggregates spans itself. Without a service: a row per
// service; with one: its charts (with exemplars that open a trace) and a row per operation.
// State in the URL: /monitor?service=…&op=…&kind=server&range=1h&sort=rate:desc

import { ApiError, KeyValue, MetricsInstantResponse, MetricsRangeResponse, hasAnyData, metricsInstant, metricsRange, tagValues } from '../api';
import { emptyState, errorBox, sendDataHelp, timeRangePicker } from '../components';
import { h, mount } from '../dom';
import { ChartExemplar, lineChart, sparkline } from '../linechart';
import { Page, navigate, replaceUrl } from '../router';
import { TimeRange, fmtCount, fmtDuration, readTimeRange, serviceColor, timeRangeLabel, writeTimeRange } from '../util';

const KINDS: [string, string][] = [
  ['server', 'Server spans'],
  ['client', 'Client spans'],
  ['producer', 'Producer spans'],
  ['consumer', 'Consumer spans'],
  ['internal', 'Internal spans'],
  ['all', 'All spans'],
];
type SortKey = 'name' | 'rate' | 'errors' | 'p50' | 'p95' | 'p99';
const SORT_KEYS: SortKey[] = ['name', 'rate', 'errors', 'p50', 'p95', 'p99'];

interface State {
  service: string;
  op: string;
  kind: string;
  time: TimeRange;
  sort: SortKey;
  desc: boolean;
}

function readState(url: URL): State {
  const p = url.searchParams;
  const kind = p.get('kind') || 'server';
  const [sk, dir] = (p.get('sort') || 'rate:desc').split(':');
  return {
    service: p.get('service') || '',
    op: (p.get('service') && p.get('op')) || '',
    kind: KINDS.some(([k]) => k === kind) ? kind : 'server',
    time: readTimeRange(p, '1h'),
    sort: SORT_KEYS.includes(sk as SortKey) ? (sk as SortKey) : 'rate',
    desc: dir !== 'asc',
  };
}

function stateUrl(s: State): string {
  const p = new URLSearchParams();
  if (s.service) p.set('service', s.service);
  if (s.service && s.op) p.set('op', s.op);
  if (s.kind !== 'server') p.set('kind', s.kind);
  writeTimeRange(p, s.time);
  if (s.sort !== 'rate' || !s.desc) p.set('sort', `${s.sort}:${s.desc ? 'desc' : 'asc'}`);
  return `/monitor?${p.toString()}`;
}

function quote(s: string): string {
  return `"${s.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;
}

/** The spanset the view measures: the kind, service and operation of the state, and `extra`. */
function spanset(s: State, withOp: boolean, extra = ''): string {
  const c: string[] = [];
  if (s.service) c.push(`resource.service.name = ${quote(s.service)}`);
  if (s.op && withOp) c.push(`name = ${quote(s.op)}`);
  if (s.kind !== 'all') c.push(`kind = ${s.kind}`);
  if (extra) c.push(extra);
  return c.length ? `{ ${c.join(' && ')} }` : '{ }';
}

/** The three TraceQL metrics queries of the RED view, grouped by `by` (or not grouped). */
function redQueries(s: State, by: string, withOp: boolean): { rate: string; errors: string; duration: string } {
  const g = by ? ` by (${by})` : '';
  return {
    rate: `${spanset(s, withOp)} | rate()${g}`,
    errors: `${spanset(s, withOp, 'status = error')} | rate()${g}`,
    duration: `${spanset(s, withOp)} | quantile_over_time(duration, .5, .95, .99)${g}`,
  };
}

/** Exemplars a chart asks for: enough to find a slow or failed trace, few enough to see the line. */
const EXEMPLARS = 30;

const STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
/** The range a range query answers over, in ms: its start down and its end up to whole steps,
 *  as the API aligns them (so a chart's steps are the API's and a point's step is found by
 *  rounding down to a multiple of the step). */
function stepBounds(t: TimeRange, step: number): { startMs: number; endMs: number } {
  return { startMs: Math.floor(t.start / step) * step * 1000, endMs: Math.ceil(t.end / step) * step * 1000 };
}

/** About 100 points over the range, at a round step (seconds). */
function stepFor(t: TimeRange): number {
  const want = (t.end - t.start) / 100;
  return STEPS.find((s) => s >= want) ?? 86400;
}

const COLORS = { rate: 'var(--accent)', errors: 'var(--err)', p50: '#59a14f', p95: '#f28e2b', p99: '#b07aa1' };
const QUANTILES: ['p50' | 'p95' | 'p99', number][] = [
  ['p50', 0.5],
  ['p95', 0.95],
  ['p99', 0.99],
];

function label(labels: KeyValue[] | undefined, key: string): string | number | undefined {
  const v = labels?.find((l) => l.key === key)?.value;
  if (!v) return undefined;
  return v.stringValue ?? (v.doubleValue !== undefined ? Number(v.doubleValue) : v.intValue !== undefined ? Number(v.intValue) : undefined);
}
const quantileKey = (labels: KeyValue[] | undefined) => QUANTILES.find(([, q]) => q === label(labels, 'p'))?.[0];

type Points = [number, number][];
interface Group {
  name: string;
  rate: Points;
  errors: Points;
  p50: Points;
  p95: Points;
  p99: Points;
  /** over the whole range (instant queries) */
  total: { rate: number; errors: number; p50: number; p95: number; p99: number };
}

const points = (samples: { timestampMs: string; value: number }[] | undefined): Points => (samples || []).map((p) => [Number(p.timestampMs), p.value]);

/** The error rate (0–1) at each step with requests: errors a second over requests a second. */
function errorRatio(rate: Points, errors: Points): Points {
  const e = new Map(errors);
  return rate.filter(([, r]) => r > 0).map(([t, r]) => [t, (e.get(t) ?? 0) / r]);
}

/** Rows of the table: one per value of `by` in the range responses and instant responses. */
function groups(by: string, r: { rate: MetricsRangeResponse; errors: MetricsRangeResponse; duration: MetricsRangeResponse }, i: { rate: MetricsInstantResponse; errors: MetricsInstantResponse; duration: MetricsInstantResponse }): Group[] {
  const out = new Map<string, Group>();
  const get = (labels: KeyValue[] | undefined) => {
    const name = String(label(labels, by) ?? '');
    let g = out.get(name);
    if (!g) {
      g = { name, rate: [], errors: [], p50: [], p95: [], p99: [], total: { rate: 0, errors: 0, p50: NaN, p95: NaN, p99: NaN } };
      out.set(name, g);
    }
    return g;
  };
  for (const s of r.rate.series || []) get(s.labels).rate = points(s.samples);
  for (const s of r.errors.series || []) get(s.labels).errors = points(s.samples);
  for (const s of r.duration.series || []) {
    const q = quantileKey(s.labels);
    if (q) get(s.labels)[q] = points(s.samples);
  }
  for (const s of i.rate.series || []) get(s.labels).total.rate = s.value;
  for (const s of i.errors.series || []) get(s.labels).total.errors = s.value;
  for (const s of i.duration.series || []) {
    const q = quantileKey(s.labels);
    if (q) get(s.labels).total[q] = s.value;
  }
  return Array.from(out.values()).filter((g) => g.name !== '');
}

function fmtRate(v: number): string {
  if (!isFinite(v)) return '–';
  if (v === 0) return '0';
  if (v >= 100) return fmtCount(Math.round(v));
  if (v >= 1) return v.toFixed(1);
  return v.toPrecision(2);
}
const fmtPct = (v: number) => (!isFinite(v) ? '–' : v === 0 ? '0%' : `${(v * 100).toFixed(v < 0.1 ? 2 : 1)}%`);
const fmtSec = (v: number) => (!isFinite(v) ? '–' : v === 0 ? '0' : fmtDuration(v * 1e9));

export function monitorPage(url: URL): Page {
  let state = readState(url);
  let abort: AbortController | null = null;
  let lastGroups: Group[] = [];
  let chartData: (() => HTMLElement[]) | null = null;

  const picker = timeRangePicker(state.time, (t) => go({ ...state, time: t }));
  const serviceSel = h('select', { class: 'input', 'aria-label': 'Service', 'data-testid': 'monitor-service' }, h('option', { value: '' }, 'All services'));
  const kindSel = h('select', { class: 'input', 'aria-label': 'Span kind', 'data-testid': 'monitor-kind' }, KINDS.map(([k, l]) => h('option', { value: k }, l)));
  const refresh = h('button', { class: 'btn primary', type: 'submit', 'data-testid': 'monitor-run' }, 'Refresh');
  const crumbs = h('div', { class: 'monitor-crumbs' });
  const form = h(
    'form',
    { class: 'card query-panel graph-controls', autocomplete: 'off' },
    h('h1', { class: 'page-title' }, 'Monitor'),
    serviceSel,
    kindSel,
    h('span', { class: 'spacer' }),
    picker.el,
    refresh,
  );
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    go({ ...state, time: picker.get() });
  });
  serviceSel.addEventListener('change', () => go({ ...state, service: serviceSel.value, op: '' }));
  kindSel.addEventListener('change', () => go({ ...state, kind: kindSel.value }));
  const summary = h('div', { class: 'results-summary', 'data-testid': 'monitor-summary' });
  const charts = h('div', { class: 'monitor-charts' });
  const tableBox = h('div', { class: 'card table-card' });
  const el = h('div', { class: 'page monitor-page' }, form, crumbs, summary, charts, tableBox);

  function go(s: State) {
    navigate(stateUrl(s));
  }

  /** A search for the state's service (and `op`) over `time`, with `extra` conditions. */
  function searchUrl(service: string, op: string, time: TimeRange, extra = ''): string {
    const c: string[] = [];
    if (service) c.push(`resource.service.name = ${quote(service)}`);
    if (op) c.push(`name = ${quote(op)}`);
    if (extra) c.push(extra);
    const p = new URLSearchParams();
    p.set('q', c.length ? `{ ${c.join(' && ')} }` : '{}');
    writeTimeRange(p, time);
    return `/search?${p.toString()}`;
  }

  async function loadServices(t: TimeRange) {
    try {
      const vals = await tagValues('resource.service.name', { start: t.start, end: t.end });
      const names = vals.map((v) => v.value).sort((a, b) => a.localeCompare(b));
      if (state.service && !names.includes(state.service)) names.unshift(state.service);
      mount(serviceSel, h('option', { value: '' }, 'All services'), names.map((n) => h('option', { value: n }, n)));
      serviceSel.value = state.service;
    } catch {
      // keep the list
    }
  }

  function showState() {
    const t = readTimeRange(new URL(location.href).searchParams, '1h');
    state.time = t;
    picker.set(t);
    kindSel.value = state.kind;
    if (state.service && !Array.from(serviceSel.options).some((o) => o.value === state.service)) serviceSel.append(h('option', { value: state.service }, state.service));
    serviceSel.value = state.service;
    mount(
      crumbs,
      state.service
        ? [
            h('a', { href: stateUrl({ ...state, service: '', op: '' }) }, 'All services'),
            h('span', { class: 'muted' }, ' › '),
            state.op ? h('a', { href: stateUrl({ ...state, op: '' }) }, state.service) : h('b', null, state.service),
            state.op ? [h('span', { class: 'muted' }, ' › '), h('b', { class: 'mono' }, state.op)] : null,
            h('a', { class: 'btn small monitor-traces', href: searchUrl(state.service, state.op, t), 'data-testid': 'monitor-search' }, 'Find traces'),
          ]
        : null,
    );
  }

  async function run() {
    abort?.abort();
    const ctl = new AbortController();
    abort = ctl;
    showState();
    const t = state.time;
    const step = stepFor(t);
    void loadServices(t);
    refresh.disabled = true;
    mount(summary, h('span', { class: 'spin' }), h('span', { class: 'muted' }, ` Measuring ${timeRangeLabel(t).toLowerCase()}…`));
    mount(charts, state.service ? [0, 1, 2].map(() => h('div', { class: 'card skeleton monitor-chart-skeleton' })) : null);
    mount(tableBox, h('div', { class: 'skeleton monitor-table-skeleton' }));
    const by = state.service ? 'name' : 'resource.service.name';
    const table = redQueries(state, by, false);
    const range = { start: t.start, end: t.end, step };
    const t0 = performance.now();
    try {
      const chartQ = state.service ? redQueries(state, '', true) : null;
      const [rr, re, rd, ir, ie, id, cr, ce, cd] = await Promise.all([
        metricsRange({ q: table.rate, ...range }, ctl.signal),
        metricsRange({ q: table.errors, ...range }, ctl.signal),
        metricsRange({ q: table.duration, ...range }, ctl.signal),
        metricsInstant({ q: table.rate, start: t.start, end: t.end }, ctl.signal),
        metricsInstant({ q: table.errors, start: t.start, end: t.end }, ctl.signal),
        metricsInstant({ q: table.duration, start: t.start, end: t.end }, ctl.signal),
        chartQ ? metricsRange({ q: chartQ.rate, ...range, exemplars: EXEMPLARS }, ctl.signal) : null,
        chartQ ? metricsRange({ q: chartQ.errors, ...range, exemplars: EXEMPLARS }, ctl.signal) : null,
        chartQ ? metricsRange({ q: chartQ.duration, ...range, exemplars: EXEMPLARS }, ctl.signal) : null,
      ]);
      if (ctl.signal.aborted) return;
      lastGroups = groups(by, { rate: rr, errors: re, duration: rd }, { rate: ir, errors: ie, duration: id });
      const took = Math.round(performance.now() - t0);
      if (!lastGroups.length) {
        const any = await hasAnyData(ctl.signal);
        if (ctl.signal.aborted) return;
        mount(summary);
        mount(charts);
        chartData = null;
        mount(tableBox, noRows(any));
        return;
      }
      const what = state.service ? `operation${lastGroups.length === 1 ? '' : 's'} of ${state.service}` : `service${lastGroups.length === 1 ? '' : 's'}`;
      mount(
        summary,
        h('b', null, `${fmtCount(lastGroups.length)} ${what}`),
        h('span', { class: 'muted' }, ` · ${KINDS.find(([k]) => k === state.kind)![1].toLowerCase()} · ${timeRangeLabel(t).toLowerCase()} · ${step} s steps · ${took} ms`),
      );
      if (chartQ && cr && ce && cd) {
        chartData = () => serviceCharts(state, t, step, chartQ, cr, ce, cd);
        renderCharts();
      } else {
        chartData = null;
        mount(charts);
      }
      renderTable();
    } catch (e) {
      if ((e as Error).name === 'AbortError') return;
      mount(summary);
      mount(charts);
      chartData = null;
      mount(tableBox, errorBox(e, (e as ApiError).status === 400 ? 'Invalid query' : 'Could not measure'));
    } finally {
      if (abort === ctl) refresh.disabled = false;
    }
  }

  function noRows(any: boolean): HTMLElement {
    if (!any) return emptyState('No traces yet', sendDataHelp());
    return emptyState(
      `No ${state.kind === 'all' ? '' : `${state.kind} `}spans${state.service ? ` of ${state.service}` : ''} in ${timeRangeLabel(state.time).toLowerCase()}`,
      h('p', { class: 'muted' }, 'Try a wider time range, or another span kind (services called over queues have consumer spans, batch jobs internal ones).'),
    );
  }

  /** The three charts of a service (or an operation): requests, error rate, duration. */
  function serviceCharts(s: State, t: TimeRange, step: number, q: { rate: string; errors: string; duration: string }, cr: MetricsRangeResponse, ce: MetricsRangeResponse, cd: MetricsRangeResponse): HTMLElement[] {
    const { startMs, endMs } = stepBounds(t, step);
    const stepMs = step * 1000;
    const rate = points(cr.series?.[0]?.samples);
    const errors = points(ce.series?.[0]?.samples);
    const ratio = errorRatio(rate, errors);
    const ratioAt = new Map(ratio);
    const exemplars = (r: MetricsRangeResponse, color: string, value: (t: number, v: number) => number | undefined): ChartExemplar[] => {
      const out: ChartExemplar[] = [];
      for (const series of r.series || []) {
        for (const e of series.exemplars || []) {
          const id = String(label(e.labels, 'trace:id') ?? '');
          const tMs = Number(e.timestampMs);
          const v = value(tMs, e.value);
          if (!id || v === undefined || !isFinite(v)) continue;
          out.push({ t: tMs, v, traceId: id.padStart(32, '0'), spanId: String(label(e.labels, 'span:id') ?? '') || undefined, color });
        }
      }
      return out;
    };
    const stepOf = (tMs: number) => Math.floor(tMs / stepMs) * stepMs;
    const openTrace = (e: ChartExemplar) => navigate(`/trace/${e.traceId}${e.spanId ? `?span=${e.spanId}` : ''}`);
    const stepRange = (tMs: number): TimeRange => ({ range: '', start: Math.floor(tMs / 1000), end: Math.ceil((tMs + stepMs) / 1000) });
    const common = { startMs, endMs, stepMs, onExemplar: openTrace };
    const width = Math.max(300, Math.floor((charts.clientWidth || 1200) / 3) - 8);
    return [
      lineChart(
        {
          ...common,
          title: 'Requests per second',
          testid: 'chart-rate',
          query: q.rate,
          series: [{ name: 'rate', color: COLORS.rate, points: rate }],
          exemplars: exemplars(cr, COLORS.rate, (_, v) => v),
          fmt: fmtRate,
          onPick: (tMs) => navigate(searchUrl(s.service, s.op, stepRange(tMs))),
        },
        width,
      ),
      lineChart(
        {
          ...common,
          title: 'Error rate',
          testid: 'chart-errors',
          query: q.errors,
          series: [{ name: 'error rate', color: COLORS.errors, points: ratio }],
          exemplars: exemplars(ce, COLORS.errors, (tMs) => ratioAt.get(stepOf(tMs))),
          fmt: fmtPct,
          onPick: (tMs) => navigate(searchUrl(s.service, s.op, stepRange(tMs), 'status = error')),
        },
        width,
      ),
      lineChart(
        {
          ...common,
          title: 'Duration',
          testid: 'chart-duration',
          query: q.duration,
          series: QUANTILES.map(([k, p]) => ({ name: k, color: COLORS[k], points: points(cd.series?.find((x) => label(x.labels, 'p') === p)?.samples) })),
          exemplars: exemplars(cd, 'var(--text-2)', (_, v) => v),
          fmt: fmtSec,
          onPick: (tMs) => navigate(searchUrl(s.service, s.op, stepRange(tMs))),
        },
        width,
      ),
    ];
  }

  function renderCharts() {
    if (chartData) mount(charts, chartData());
  }

  function renderTable() {
    const s = state;
    const t = s.time;
    const { startMs, endMs } = stepBounds(t, stepFor(t));
    const dir = s.desc ? -1 : 1;
    const key = (g: Group): number | string =>
      s.sort === 'name' ? g.name : s.sort === 'rate' ? g.total.rate : s.sort === 'errors' ? (g.total.rate ? g.total.errors / g.total.rate : 0) : isFinite(g.total[s.sort]) ? g.total[s.sort] : -1;
    const rows = lastGroups.slice().sort((a, b) => {
      const x = key(a);
      const y = key(b);
      return (x < y ? -1 : x > y ? 1 : 0) * dir || a.name.localeCompare(b.name);
    });
    const th = (k: SortKey, text: string, cls = '') =>
      h(
        'th',
        { class: `${cls} sortable ${s.sort === k ? 'sorted' : ''}`, 'data-sort': k, tabindex: 0, 'aria-sort': s.sort === k ? (s.desc ? 'descending' : 'ascending') : 'none' },
        text,
        h('span', { class: 'sort-ind' }, s.sort === k ? (s.desc ? '▼' : '▲') : ''),
      );
    const isOps = !!s.service;
    const body = h('tbody');
    for (const g of rows) {
      const errRatio = g.total.rate ? g.total.errors / g.total.rate : 0;
      const service = isOps ? s.service : g.name;
      const op = isOps ? g.name : '';
      body.append(
        h(
          'tr',
          {
            'data-testid': 'monitor-row',
            'data-name': g.name,
            'data-rate': g.total.rate,
            'data-error-ratio': errRatio,
            'data-p95': g.total.p95,
            tabindex: 0,
            class: errRatio >= 0.05 ? 'has-error' : '',
            title: isOps ? `Search the traces of ${op}` : `Rate, errors and duration of ${service}'s operations`,
          },
          h('td', { class: 'c-trace' }, isOps ? null : h('span', { class: 'swatch', style: `background:${serviceColor(g.name)}` }), h('b', { class: isOps ? 'mono' : '' }, g.name)),
          h('td', { class: 'c-num c-spark' }, sparkline([{ points: g.rate, color: COLORS.rate }], startMs, endMs), h('span', null, fmtRate(g.total.rate))),
          h('td', { class: 'c-num c-spark' }, sparkline([{ points: errorRatio(g.rate, g.errors), color: COLORS.errors }], startMs, endMs), errRatio ? h('span', { class: 'badge err' }, fmtPct(errRatio)) : h('span', null, '0%')),
          h('td', { class: 'c-num', title: 'p50, p95 and p99 over time' }, sparkline(QUANTILES.map(([k]) => ({ points: g[k], color: COLORS[k] })), startMs, endMs)),
          h('td', { class: 'c-num' }, fmtSec(g.total.p50)),
          h('td', { class: 'c-num' }, fmtSec(g.total.p95)),
          h('td', { class: 'c-num' }, fmtSec(g.total.p99)),
          h(
            'td',
            { class: 'c-actions' },
            isOps ? h('a', { class: 'btn small', href: stateUrl({ ...s, op }), 'data-testid': 'monitor-focus', title: `Charts of ${op}` }, 'Charts') : null,
            h('a', { class: 'btn small', href: searchUrl(service, op, t), 'data-testid': 'monitor-row-search' }, 'Traces'),
          ),
        ),
      );
    }
    mount(
      tableBox,
      h(
        'table',
        { class: 'results-table monitor-table', 'data-testid': 'monitor-table' },
        h(
          'thead',
          null,
          h(
            'tr',
            null,
            th('name', isOps ? 'Operation' : 'Service'),
            th('rate', 'Requests/s', 'c-num'),
            th('errors', 'Error rate', 'c-num'),
            h('th', { class: 'c-num' }, 'Duration'),
            th('p50', 'p50', 'c-num'),
            th('p95', 'p95', 'c-num'),
            th('p99', 'p99', 'c-num'),
            h('th', null),
          ),
        ),
        body,
      ),
    );
  }

  function activateRow(tr: Element, ev: Event) {
    const name = tr.getAttribute('data-name') || '';
    const newTab = (ev as MouseEvent).ctrlKey || (ev as MouseEvent).metaKey;
    const to = state.service ? searchUrl(state.service, name, state.time) : stateUrl({ ...state, service: name, op: '' });
    if (newTab) window.open(to, '_blank');
    else navigate(to);
  }
  tableBox.addEventListener('click', (ev) => {
    const target = ev.target as Element;
    const th = target.closest('th[data-sort]');
    if (th) {
      const k = th.getAttribute('data-sort') as SortKey;
      if (state.sort === k) state.desc = !state.desc;
      else {
        state.sort = k;
        state.desc = k !== 'name';
      }
      replaceUrl(stateUrl(state));
      renderTable();
      return;
    }
    if (target.closest('a')) return;
    const tr = target.closest('tr[data-testid="monitor-row"]');
    if (tr) activateRow(tr, ev);
  });
  tableBox.addEventListener('keydown', (ev) => {
    if (ev.key !== 'Enter' && ev.key !== ' ') return;
    const target = ev.target as Element;
    if (target.closest('a')) return;
    const el2 = target.closest('th[data-sort], tr[data-testid="monitor-row"]');
    if (!el2) return;
    ev.preventDefault();
    if (el2.tagName === 'TH') (el2 as HTMLElement).click();
    else activateRow(el2, ev);
  });

  let resizeObs: ResizeObserver | null = null;
  if (typeof ResizeObserver !== 'undefined') {
    let lastW = 0;
    resizeObs = new ResizeObserver(() => {
      const w = charts.clientWidth;
      if (w && Math.abs(w - lastW) > 8) {
        lastW = w;
        renderCharts();
      }
    });
    resizeObs.observe(charts);
  }

  document.title = 'Monitor · weft';
  queueMicrotask(() => void run());
  return {
    el,
    update(u: URL) {
      state = readState(u);
      document.title = 'Monitor · weft';
      void run();
      return true;
    },
    destroy() {
      abort?.abort();
      resizeObs?.disconnect();
    },
  };
}
