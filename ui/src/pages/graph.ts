// Service graph: calls between services over a time range, counted by the server from the
// parent/child spans of every trace in the range (/api/service-graph), drawn as a layered SVG
// with a table of edges. An optional TraceQL filter keeps only the matching traces.

import { ApiError, GraphEdge, ServiceGraphResponse, hasAnyData, serviceGraph } from '../api';
import { attachAutocomplete } from '../autocomplete';
import { emptyState, errorBox, sendDataHelp, timeRangePicker } from '../components';
import { h, mount, svg } from '../dom';
import { Page, navigate, replaceUrl } from '../router';
import { View, panZoom, parseView, viewParam } from '../panzoom';
import { TimeRange, fmtCount, fmtDateTime, fmtDuration, plural, readTimeRange, serviceColor, timeRangeLabel, writeTimeRange } from '../util';

interface Edge {
  from: string;
  to: string;
  calls: number;
  errors: number;
  p50: number;
  p90: number;
  p99: number;
}
interface NodeInfo {
  name: string;
  spans: number;
  errors: number;
  layer: number;
  order: number;
  x: number;
  y: number;
}
type Stats = Map<string, { spans: number; errors: number }>;

function readParams(url: URL): { time: TimeRange; q: string; view: View | null } {
  return { time: readTimeRange(url.searchParams, '1h'), q: (url.searchParams.get('q') || '').trim(), view: parseView(url.searchParams.get('view')) };
}

function paramsUrl(time: TimeRange, q: string): string {
  const p = new URLSearchParams();
  if (q.trim()) p.set('q', q.trim());
  writeTimeRange(p, time);
  return `/graph?${p.toString()}`;
}

/** TraceQL for a service name in a string literal. */
function quoted(s: string): string {
  return `"${s.replace(/["\\]/g, '\\$&')}"`;
}

export function graphPage(url: URL): Page {
  let params = readParams(url);
  let abort: AbortController | null = null;

  const picker = timeRangePicker(params.time, (t) => navigate(paramsUrl(t, qIn.value)));
  const qIn = h('input', {
    class: 'input mono traceql',
    'data-testid': 'graph-filter',
    'aria-label': 'Only traces matching (TraceQL)',
    placeholder: 'all traces; or e.g. { resource.deployment.environment = "prod" }',
  });
  qIn.value = params.q;
  const refresh = h('button', { class: 'btn primary', type: 'submit', 'data-testid': 'graph-run' }, 'Refresh');
  const note = h('div', { class: 'results-summary', 'data-testid': 'graph-summary' });
  const body = h('div', { class: 'graph-body' });
  const form = h(
    'form',
    { class: 'card query-panel graph-controls', autocomplete: 'off' },
    h('h1', { class: 'page-title' }, 'Service graph'),
    h('div', { class: 'traceql-wrap grow' }, h('span', { class: 'ql-badge' }, 'Filter'), qIn),
    picker.el,
    refresh,
  );
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    navigate(paramsUrl(picker.get(), qIn.value));
  });
  attachAutocomplete(qIn, () => picker.get(), () => navigate(paramsUrl(picker.get(), qIn.value)));
  const el = h('div', { class: 'page graph-page' }, form, note, body);

  async function run() {
    abort?.abort();
    const ctl = new AbortController();
    abort = ctl;
    const t = readTimeRange(new URL(location.href).searchParams, '1h');
    picker.set(t);
    qIn.value = params.q;
    refresh.disabled = true;
    mount(note, h('span', { class: 'spin' }), h('span', { class: 'muted' }, ` Counting calls in ${timeRangeLabel(t).toLowerCase()}…`));
    mount(body, h('div', { class: 'card skeleton graph-skeleton' }));
    try {
      const res = await serviceGraph({ q: params.q || undefined, start: t.start, end: t.end }, ctl.signal);
      if (ctl.signal.aborted) return;
      const services = res.services || [];
      if (!services.length) {
        const any = params.q ? true : await hasAnyData(ctl.signal);
        mount(note);
        mount(body, noServices(params.q, any));
        return;
      }
      const edges = toEdges(res.edges || []);
      const stats: Stats = new Map(services.map((s) => [s.name, { spans: s.spanCount, errors: s.errorCount }]));
      mount(note, ...graphSummary(res, edges, t, params.q));
      render(edges, stats, t);
    } catch (e) {
      if ((e as Error).name === 'AbortError') return;
      mount(note);
      mount(body, errorBox(e, (e as ApiError).status === 400 ? 'Invalid filter' : 'Could not build the graph'));
    } finally {
      if (abort === ctl) refresh.disabled = false;
    }
  }

  /** Search for the traces with a call from one service to another (or of one service). */
  function searchUrl(q: string): string {
    const p = new URLSearchParams();
    p.set('q', q);
    writeTimeRange(p, picker.get());
    return `/search?${p.toString()}`;
  }

  function render(edges: Edge[], nodeStats: Stats, t: TimeRange) {
    const layout = layoutGraph(edges, nodeStats);
    const minutes = Math.max(1, (t.end - t.start) / 60);
    const table = edgeTable(edges, minutes, searchUrl);
    // the whole graph fits the card at first (zoom and pan from there); the zoomed view is in
    // the URL (view=x,y,w,h)
    const lw = layout.viewBox.baseVal.width;
    const lh = layout.viewBox.baseVal.height;
    const cardW = Math.max(320, body.clientWidth - 18);
    const fitH = lh * Math.min(1, cardW / lw);
    const height = Math.round(Math.min(lh, Math.max(fitH, 420)));
    const zoom = panZoom(layout, lw, lh, height, params.view, (v) => {
      const u = new URL(location.href);
      if (v) u.searchParams.set('view', viewParam(v));
      else u.searchParams.delete('view');
      replaceUrl(u.pathname + u.search);
    });
    mount(
      body,
      h('div', { class: 'card graph-card' }, zoom.el),
      edges.length ? h('div', { class: 'card table-card' }, table) : h('p', { class: 'muted' }, 'No calls between different services in this time range: every trace stays within one service.'),
    );
  }

  // hovering a service highlights its edges; clicking it searches its traces
  highlightOnHover(body);
  body.addEventListener('click', (ev) => {
    const node = (ev.target as Element).closest('[data-testid="graph-node"]');
    if (!node) return;
    navigate(searchUrl(`{ resource.service.name = ${quoted(node.getAttribute('data-service') || '')} }`));
  });

  document.title = 'Service graph · weft';
  queueMicrotask(() => void run());

  return {
    el,
    update(u: URL) {
      params = readParams(u);
      void run();
      return true;
    },
    destroy() {
      abort?.abort();
    },
  };
}

/** The response's edges, with their latencies as numbers. */
function toEdges(edges: GraphEdge[]): Edge[] {
  return edges.map((e: GraphEdge) => ({
    from: e.parent,
    to: e.child,
    calls: e.callCount,
    errors: e.errorCount,
    p50: Number(e.latencyP50Nano),
    p90: Number(e.latencyP90Nano),
    p99: Number(e.latencyP99Nano),
  }));
}

/** What shows when the range has no services: a wider range or filter to try, or how to send data. */
function noServices(q: string, any: boolean): HTMLElement {
  return any
    ? emptyState(
        q ? 'No traces match the filter in this time range' : 'No traces in this time range',
        h('div', { class: 'help' }, h('p', { class: 'muted' }, 'The graph counts the calls in the traces of the chosen time range. Try a wider range', q ? ' or another filter.' : '.')),
      )
    : emptyState('No traces yet', sendDataHelp());
}

/** The line above the graph: calls, services and spans counted, and whether the count is partial. */
function graphSummary(res: ServiceGraphResponse, edges: Edge[], t: TimeRange, q: string): (HTMLElement | null)[] {
  const services = res.services || [];
  const spans = services.reduce((n, s) => n + s.spanCount, 0);
  const calls = edges.reduce((n, e) => n + e.calls, 0);
  const scope = q ? ' of matching traces' : '';
  return [
    h(
      'span',
      null,
      h('b', { 'data-testid': 'graph-calls', 'data-calls': calls }, `${fmtCount(calls)} call${calls === 1 ? '' : 's'}`),
      ` between ${plural(services.length, 'service')}, from ${plural(spans, 'span')}${scope} in ${timeRangeLabel(t).toLowerCase()}. Red: ${ERROR_RATE_MARK * 100}% or more failed.`,
      edges.length > DENSE_EDGES ? ' Point at a service to see the counts on its calls.' : '',
    ),
    res.complete
      ? null
      : h(
          'span',
          { class: 'warn-text', 'data-testid': 'graph-partial' },
          ` The range holds more than one request reads: counted from ${fmtDateTime(Number(res.countedFrom || 0) / 1e6, false)} to the end. Narrow the range for totals.`,
        ),
    res.unresolvedCalls
      ? h(
          'span',
          { class: 'muted', title: 'Calls in traces stored in several pieces whose caller was not looked up' },
          ` ${fmtCount(res.unresolvedCalls)} call${res.unresolvedCalls === 1 ? '' : 's'} of split traces not attributed.`,
        )
      : null,
  ];
}

/** The table of edges; a click on a row opens the search for its calls (`searchUrl`). */
function edgeTable(edges: Edge[], minutes: number, searchUrl: (q: string) => string): HTMLTableElement {
  return h(
    'table',
    { class: 'results-table edge-table' },
    h(
      'thead',
      null,
      h(
        'tr',
        null,
        h('th', null, 'Caller'),
        h('th', null, 'Callee'),
        h('th', { class: 'c-num' }, 'Calls'),
        h('th', { class: 'c-num' }, 'Per minute'),
        h('th', { class: 'c-num' }, 'Errors'),
        h('th', { class: 'c-num' }, 'Error rate'),
        h('th', { class: 'c-num', title: 'Duration of the callee spans' }, 'p50'),
        h('th', { class: 'c-num', title: 'Duration of the callee spans' }, 'p90'),
        h('th', { class: 'c-num', title: 'Duration of the callee spans' }, 'p99'),
      ),
    ),
    h(
      'tbody',
      null,
      edges.map((e) => {
        const tr = h(
          'tr',
          {
            class: e.errors / e.calls >= ERROR_RATE_MARK ? 'has-error' : '',
            'data-testid': 'edge-row',
            'data-from': e.from,
            'data-to': e.to,
            title: `Search the traces where ${e.from} calls ${e.to}`,
          },
          h('td', null, h('span', { class: 'swatch', style: `background:${serviceColor(e.from)}` }), e.from),
          h('td', null, h('span', { class: 'swatch', style: `background:${serviceColor(e.to)}` }), e.to),
          h('td', { class: 'c-num' }, fmtCount(e.calls)),
          h('td', { class: 'c-num' }, fmtRate(e.calls / minutes)),
          h('td', { class: 'c-num' }, e.errors ? h('span', { class: 'badge err' }, fmtCount(e.errors)) : '0'),
          h('td', { class: 'c-num' }, `${((e.errors / e.calls) * 100).toFixed(1)}%`),
          h('td', { class: 'c-num' }, fmtDuration(e.p50)),
          h('td', { class: 'c-num' }, fmtDuration(e.p90)),
          h('td', { class: 'c-num' }, fmtDuration(e.p99)),
        );
        tr.addEventListener('click', () => navigate(searchUrl(`{ resource.service.name = ${quoted(e.from)} } > { resource.service.name = ${quoted(e.to)} }`)));
        return tr;
      }),
    ),
  );
}

/** Highlights the edges of the service under the pointer in the graph drawn inside `body`. */
function highlightOnHover(body: HTMLElement) {
  body.addEventListener('mouseover', (ev) => {
    const node = (ev.target as Element).closest('[data-testid="graph-node"]');
    const g = body.querySelector('svg.service-graph');
    if (!g) return;
    const name = node?.getAttribute('data-service') ?? null;
    g.classList.toggle('focus', !!name);
    for (const e of g.querySelectorAll('[data-testid="graph-edge"], .edge-label')) {
      e.classList.toggle('hl', !!name && (e.getAttribute('data-from') === name || e.getAttribute('data-to') === name));
    }
    for (const n of g.querySelectorAll('[data-testid="graph-node"]')) n.classList.toggle('hl', n === node);
  });
}

function fmtRate(perMinute: number): string {
  if (perMinute >= 100) return fmtCount(Math.round(perMinute));
  if (perMinute >= 1) return perMinute.toFixed(1);
  return perMinute.toFixed(2);
}

// --- layout ----------------------------------------------------------------------------------

const NODE_W = 168;
const NODE_H = 46;
const COL_GAP = 120;
const ROW_GAP = 26;
const PAD = 24;
/** Room left and right of the columns for arcs of calls that go back or stay in a column. */
const PAD_X = 72;
const MAX_BULGE = 64;

/**
 * Columns for the services: callers left of callees. Real service graphs have cycles (a
 * callback, a service that calls back into the gateway), so first order the services so that
 * the calls going backwards are as few as possible, weighted by call count (the greedy
 * heuristic of Eades, Lin and Smyth: peel off services nobody remaining calls or that call
 * nobody remaining, else the one with the most calls out minus calls in). Each service's
 * column is then the longest chain of forward calls leading to it; backward calls are drawn
 * as arcs.
 */
function layerServices(names: string[], edges: Edge[]): Map<string, number> {
  const outW = new Map<string, Map<string, number>>();
  const inW = new Map<string, Map<string, number>>();
  for (const n of names) {
    outW.set(n, new Map());
    inW.set(n, new Map());
  }
  for (const e of edges) {
    if (e.from === e.to) continue;
    outW.get(e.from)!.set(e.to, (outW.get(e.from)!.get(e.to) || 0) + e.calls);
    inW.get(e.to)!.set(e.from, (inW.get(e.to)!.get(e.from) || 0) + e.calls);
  }
  const left: string[] = [];
  const right: string[] = [];
  const remaining = new Set(names.slice().sort((a, b) => a.localeCompare(b)));
  const sum = (m: Map<string, number>) => {
    let t = 0;
    for (const [k, v] of m) if (remaining.has(k)) t += v;
    return t;
  };
  while (remaining.size) {
    let peeled = true;
    while (peeled) {
      peeled = false;
      for (const n of remaining) {
        if (sum(outW.get(n)!) === 0) {
          right.unshift(n);
          remaining.delete(n);
          peeled = true;
        } else if (sum(inW.get(n)!) === 0) {
          left.push(n);
          remaining.delete(n);
          peeled = true;
        }
      }
    }
    let best: string | null = null;
    let bestScore = -Infinity;
    for (const n of remaining) {
      const score = sum(outW.get(n)!) - sum(inW.get(n)!);
      if (score > bestScore) {
        best = n;
        bestScore = score;
      }
    }
    if (best !== null) {
      left.push(best);
      remaining.delete(best);
    }
  }
  const order = left.concat(right);
  const rank = new Map(order.map((n, i) => [n, i]));
  const layer = new Map<string, number>(order.map((n) => [n, 0]));
  for (const n of order) {
    for (const k of outW.get(n)!.keys()) {
      if (rank.get(k)! > rank.get(n)!) layer.set(k, Math.max(layer.get(k)!, layer.get(n)! + 1));
    }
  }
  return layer;
}

/** An edge or service is drawn as failing from this error rate on. */
const ERROR_RATE_MARK = 0.05;
/** With more edges than this, edge labels would pile on each other: they are shown only for the
 * edges of the service under the pointer (the table below lists every edge's numbers). */
const DENSE_EDGES = 16;

function layoutGraph(edges: Edge[], stats: Stats): SVGSVGElement {
  const names = Array.from(stats.keys());
  for (const e of edges) for (const n of [e.from, e.to]) if (!stats.has(n)) names.push(n);
  const layers = serviceColumns(names, edges);
  const { nodes, width, height } = placeNodes(layers, stats);

  const maxCalls = Math.max(1, ...edges.map((e) => e.calls));
  const root = svg('svg', {
    'data-testid': 'service-graph',
    class: edges.length > DENSE_EDGES ? 'service-graph dense' : 'service-graph',
    width,
    height,
    viewBox: `0 0 ${width} ${height}`,
    role: 'img',
    'aria-label': `Service graph: ${nodes.size} services, ${edges.length} edges`,
  });
  root.appendChild(
    svg(
      'defs',
      null,
      svg('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 9, markerHeight: 9, markerUnits: 'userSpaceOnUse', orient: 'auto-start-reverse' }, svg('path', { d: 'M0,0 L10,5 L0,10 z', class: 'arrow' })),
      svg('marker', { id: 'arrow-err', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 9, markerHeight: 9, markerUnits: 'userSpaceOnUse', orient: 'auto-start-reverse' }, svg('path', { d: 'M0,0 L10,5 L0,10 z', class: 'arrow err' })),
    ),
  );
  const edgeG = svg('g', { class: 'edges' });
  const labelG = svg('g', { class: 'edge-labels' });
  const boxes: Box[] = Array.from(nodes.values(), (n) => ({ x: n.x, y: n.y, w: NODE_W, h: NODE_H }));
  const taken: Box[] = [];
  // the busiest calls' labels are placed first
  for (const e of edges.slice().sort((x, y) => y.calls - x.calls)) {
    const { path, label } = drawEdge(e, nodes.get(e.from)!, nodes.get(e.to)!, maxCalls, boxes, taken);
    edgeG.appendChild(path);
    labelG.appendChild(label);
  }
  root.appendChild(edgeG);
  const nodeG = svg('g', { class: 'nodes' });
  for (const n of nodes.values()) nodeG.appendChild(drawNode(n));
  root.appendChild(labelG);
  root.appendChild(nodeG);
  return root;
}

/** The services in columns (layerServices; services without cross-service calls in a last
 * column), each column ordered by the barycentre of its callers in the column before. */
function serviceColumns(names: string[], edges: Edge[]): string[][] {
  const out = new Map<string, string[]>();
  const indeg = new Map<string, number>();
  for (const n of names) {
    out.set(n, []);
    indeg.set(n, 0);
  }
  for (const e of edges) {
    out.get(e.from)!.push(e.to);
    indeg.set(e.to, (indeg.get(e.to) || 0) + 1);
  }

  const preds = new Map<string, string[]>();
  for (const n of names) preds.set(n, []);
  for (const e of edges) preds.get(e.to)!.push(e.from);
  const layer = layerServices(names, edges);
  // isolated services (no cross-service calls) go in a last column of their own
  let maxLayer = 0;
  for (const [n, v] of layer) if (out.get(n)!.length || preds.get(n)!.length) maxLayer = Math.max(maxLayer, v);
  for (const n of names) if (!out.get(n)!.length && !preds.get(n)!.length) layer.set(n, edges.length ? maxLayer + 1 : 0);
  const layers: string[][] = [];
  for (const n of names.slice().sort((a, b) => a.localeCompare(b))) {
    const l = layer.get(n)!;
    (layers[l] ||= []).push(n);
  }
  for (let l = 0; l < layers.length; l++) layers[l] ||= [];
  // order within layers: barycentre of neighbours in the previous layer, a few sweeps
  const pos = new Map<string, number>();
  layers.forEach((ns) => ns.forEach((n, i) => pos.set(n, i)));
  for (let sweep = 0; sweep < 4; sweep++) {
    for (let l = 1; l < layers.length; l++) {
      const bc = new Map<string, number>();
      for (const n of layers[l]) {
        const ps = preds.get(n)!.filter((p) => layer.get(p) === l - 1);
        bc.set(n, ps.length ? ps.reduce((s2, p) => s2 + pos.get(p)!, 0) / ps.length : pos.get(n)!);
      }
      layers[l].sort((a, b) => bc.get(a)! - bc.get(b)!);
      layers[l].forEach((n, i) => pos.set(n, i));
    }
  }
  return layers;
}

/** Each service's box position, column by column, each column centred vertically; and the
 * drawing's size. */
function placeNodes(layers: string[][], stats: Stats): { nodes: Map<string, NodeInfo>; width: number; height: number } {
  const maxRows = Math.max(...layers.map((l) => l.length));
  const height = PAD * 2 + maxRows * NODE_H + (maxRows - 1) * ROW_GAP + 30;
  const width = PAD_X * 2 + layers.length * NODE_W + (layers.length - 1) * COL_GAP;
  const nodes = new Map<string, NodeInfo>();
  layers.forEach((ns, l) => {
    const colH = ns.length * NODE_H + (ns.length - 1) * ROW_GAP;
    const y0 = (height - colH) / 2;
    ns.forEach((n, i) => {
      const st = stats.get(n) || { spans: 0, errors: 0 };
      nodes.set(n, { name: n, spans: st.spans, errors: st.errors, layer: l, order: i, x: PAD_X + l * (NODE_W + COL_GAP), y: y0 + i * (NODE_H + ROW_GAP) });
    });
  });
  return { nodes, width, height };
}

/** A cubic Bézier: start, two control points, end. */
type Curve = [number, number, number, number, number, number, number, number];

/** The curve of a call from box `a` to box `b` (forward, within a column, or back) and where
 * along it (0–1) its label goes best. */
function edgeCurve(a: NodeInfo, b: NodeInfo): { c: Curve; t: number } {
  if (b.layer > a.layer) {
    const x1 = a.x + NODE_W;
    const y1 = a.y + NODE_H / 2 - 4;
    const x2 = b.x - 1;
    const y2 = b.y + NODE_H / 2 - 4;
    if (b.layer - a.layer > 1) {
      // across columns between: arc over the boxes, its middle in the gap above the higher one
      const gap = Math.min(a.y, b.y) - ROW_GAP / 2;
      const yc = (gap - 0.125 * (y1 + y2)) / 0.75;
      const k = (x2 - x1) * 0.2;
      return { c: [x1, y1, x1 + k, yc, x2 - k, yc, x2, y2], t: 0.5 };
    }
    const cx = (x1 + x2) / 2;
    // label near the callee end, where edges fan out less
    return { c: [x1, y1, cx, y1, cx, y2, x2, y2], t: 0.62 };
  }
  if (b.layer === a.layer) {
    // same column: an arc bulging right
    const x1 = a.x + NODE_W;
    const y1 = a.y + NODE_H / 2 + 6;
    const x2 = b.x + NODE_W + 1;
    const y2 = b.y + NODE_H / 2 + 6;
    const bulge = Math.min(MAX_BULGE, 34 + Math.abs(a.order - b.order) * 6);
    return { c: [x1, y1, x1 + bulge, y1, x2 + bulge, y2, x2, y2], t: 0.5 };
  }
  // back to an earlier column: leave from the left, enter from the right, lower half
  const x1 = a.x;
  const y1 = a.y + NODE_H - 10;
  const x2 = b.x + NODE_W + 1;
  const y2 = b.y + NODE_H - 10;
  return { c: [x1, y1, x1 - 50, y1 + 24, x2 + 50, y2 + 24, x2, y2], t: 0.5 };
}

function curvePoint(c: Curve, t: number): [number, number] {
  const u = 1 - t;
  const a = u * u * u;
  const b = 3 * u * u * t;
  const d = 3 * u * t * t;
  const e = t * t * t;
  return [a * c[0] + b * c[2] + d * c[4] + e * c[6], a * c[1] + b * c[3] + d * c[5] + e * c[7]];
}

interface Box {
  x: number;
  y: number;
  w: number;
  h: number;
}
const overlaps = (p: Box, q: Box) => p.x < q.x + q.w && q.x < p.x + p.w && p.y < q.y + q.h && q.y < p.y + p.h;

/** Where a label `w` wide goes on curve `c`: the first point, from `t` outwards, where it covers
 * no service box and no label placed before it (else at `t`). Adds its box to `taken`. */
function placeLabel(c: Curve, t: number, w: number, nodes: Box[], taken: Box[]): [number, number] {
  let fallback: [number, number] | null = null;
  for (const dt of [0, 0.08, -0.08, 0.16, -0.16, 0.24, -0.24, 0.3, -0.32, 0.36, -0.4]) {
    const tt = t + dt;
    if (tt < 0.08 || tt > 0.92) continue;
    const [x, y] = curvePoint(c, tt);
    const box = { x: x - w / 2 - 2, y: y - 11, w: w + 4, h: 22 };
    if (nodes.some((n) => overlaps(n, box))) continue;
    if (!taken.some((l) => overlaps(l, box))) {
      taken.push(box);
      return [x, y];
    }
    fallback ||= [x, y];
  }
  const at = fallback || curvePoint(c, t);
  taken.push({ x: at[0] - w / 2, y: at[1] - 9, w, h: 18 });
  return at;
}

/** A call's arrow from `a` to `b`, as thick as its share of `maxCalls` (log scale), and its
 * label of calls and error rate; both red when failing. */
function drawEdge(e: Edge, a: NodeInfo, b: NodeInfo, maxCalls: number, nodes: Box[], taken: Box[]): { path: SVGPathElement; label: SVGGElement } {
  const { c, t } = edgeCurve(a, b);
  const d = `M${c[0]},${c[1]} C${c[2]},${c[3]} ${c[4]},${c[5]} ${c[6]},${c[7]}`;
  const w = 1.2 + (Math.log(1 + e.calls) / Math.log(1 + maxCalls)) * 3.5;
  const failing = e.errors / e.calls >= ERROR_RATE_MARK;
  const cls = failing ? 'edge err' : 'edge';
  const path = svg(
    'path',
    {
      d,
      class: cls,
      'stroke-width': w.toFixed(1),
      'marker-end': failing ? 'url(#arrow-err)' : 'url(#arrow)',
      'data-testid': 'graph-edge',
      'data-from': e.from,
      'data-to': e.to,
      'data-calls': e.calls,
      'data-errors': e.errors,
    },
    svg('title', null, `${e.from} → ${e.to}\n${plural(e.calls, 'call')}, ${plural(e.errors, 'error')}\np50 ${fmtDuration(e.p50)} · p90 ${fmtDuration(e.p90)} · p99 ${fmtDuration(e.p99)}`),
  );
  const text = `${fmtCount(e.calls)}${e.errors ? ` · ${((e.errors / e.calls) * 100).toFixed(e.errors / e.calls < 0.1 ? 1 : 0)}% err` : ''}`;
  const lw = text.length * 6.4 + 10;
  const [lx, ly] = placeLabel(c, t, lw, nodes, taken);
  const label = svg(
    'g',
    { class: `edge-label${failing ? ' err' : ''}`, 'data-from': e.from, 'data-to': e.to, transform: `translate(${lx.toFixed(1)},${ly.toFixed(1)})` },
    svg('rect', { x: -lw / 2, y: -9, width: lw, height: 18, rx: 9 }),
    svg('text', { x: 0, y: 4, 'text-anchor': 'middle' }, text),
  );
  return { path, label };
}

/** A service's box: colour stripe, name, and its span and error counts. */
function drawNode(n: NodeInfo): SVGGElement {
  const label = n.name.length > 22 ? `${n.name.slice(0, 21)}…` : n.name;
  return svg(
    'g',
    { class: `node${n.spans && n.errors / n.spans >= ERROR_RATE_MARK ? ' err' : ''}`, transform: `translate(${n.x},${n.y})`, 'data-testid': 'graph-node', 'data-service': n.name },
    svg('title', null, `${n.name}\n${plural(n.spans, 'span')}, ${plural(n.errors, 'error')}\nClick to search its traces`),
    svg('rect', { width: NODE_W, height: NODE_H, rx: 8 }),
    svg('rect', { width: 6, height: NODE_H, rx: 3, fill: serviceColor(n.name), class: 'node-stripe' }),
    svg('text', { x: 16, y: 19, class: 'node-name' }, label),
    svg('text', { x: 16, y: 35, class: 'node-sub' }, `${plural(n.spans, 'span')}${n.errors ? ` · ${fmtCount(n.errors)} err` : ''}`),
  );
}
