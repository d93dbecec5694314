// Service graph: sample recent traces, build service→service edges from parent/child spans
// whose services differ, draw a layered SVG.

import { ApiError, SearchTrace, getTrace, hasAnyData, search } from '../api';
import { emptyState, errorBox, sendDataHelp, timeRangePicker } from '../components';
import { h, mount, svg } from '../dom';
import { buildTrace } from '../model';
import { Page, navigate } from '../router';
import { TimeRange, fmtCount, mapLimit, readTimeRange, serviceColor, timeRangeLabel, writeTimeRange } from '../util';

interface Edge {
  from: string;
  to: string;
  calls: number;
  errors: number;
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

const SAMPLE_SIZES = [25, 50, 100];
const CONCURRENCY = 6;
const MAX_SPANS_PER_TRACE = 5000;

function readParams(url: URL): { time: TimeRange; sample: number } {
  const p = url.searchParams;
  const n = Number(p.get('traces'));
  return { time: readTimeRange(p, '1h'), sample: SAMPLE_SIZES.includes(n) ? n : 50 };
}

function paramsUrl(time: TimeRange, sample: number): string {
  const p = new URLSearchParams();
  writeTimeRange(p, time);
  if (sample !== 50) p.set('traces', String(sample));
  return `/graph?${p.toString()}`;
}

export function graphPage(url: URL): Page {
  let params = readParams(url);
  let abort: AbortController | null = null;

  const picker = timeRangePicker(params.time, (t) => navigate(paramsUrl(t, params.sample)));
  const sampleSel = h('select', { class: 'input', 'aria-label': 'Traces sampled' }, SAMPLE_SIZES.map((n) => h('option', { value: n }, `${n} traces`)));
  sampleSel.addEventListener('change', () => navigate(paramsUrl(picker.get(), Number(sampleSel.value))));
  const refresh = h('button', { class: 'btn primary', type: 'button' }, 'Refresh');
  refresh.addEventListener('click', () => navigate(paramsUrl(picker.get(), Number(sampleSel.value))));
  const note = h('div', { class: 'results-summary' });
  const body = h('div', { class: 'graph-body' });
  const el = h(
    'div',
    { class: 'page graph-page' },
    h('div', { class: 'card query-panel graph-controls' }, h('h1', { class: 'page-title' }, 'Service graph'), h('span', { class: 'spacer' }), h('label', { class: 'field inline' }, h('span', { class: 'field-label' }, 'Sample'), sampleSel), picker.el, refresh),
    note,
    body,
  );

  async function run() {
    abort?.abort();
    const ctl = new AbortController();
    abort = ctl;
    const t = readTimeRange(new URL(location.href).searchParams, '1h');
    picker.set(t);
    sampleSel.value = String(params.sample);
    refresh.disabled = true;
    mount(note, h('span', { class: 'spin' }), h('span', { class: 'muted' }, ` Finding traces in ${timeRangeLabel(t).toLowerCase()}…`));
    mount(body, h('div', { class: 'card skeleton graph-skeleton' }));
    try {
      const res = await search({ q: '{}', limit: 200, start: t.start, end: t.end, spss: 1 }, ctl.signal);
      const all = res.traces || [];
      if (!all.length) {
        const any = await hasAnyData(ctl.signal);
        mount(note);
        mount(
          body,
          any
            ? emptyState('No traces in this time range', h('div', { class: 'help' }, h('p', { class: 'muted' }, 'The graph is built from the traces of the chosen time range. Try a wider one.')))
            : emptyState('No traces yet', sendDataHelp()),
        );
        return;
      }
      // very large traces (batch jobs) would dominate the time spent; leave them out
      const spanCount = (tr: SearchTrace) => (tr.spanSets || (tr.spanSet ? [tr.spanSet] : [])).reduce((n, ss) => n + (ss.matched || 0), 0);
      const usable = all.filter((tr) => spanCount(tr) <= MAX_SPANS_PER_TRACE);
      const skippedBig = all.length - usable.length;
      // spread the sample over the found traces rather than taking only the newest
      const take = Math.min(params.sample, usable.length);
      const step = usable.length / Math.max(1, take);
      const ids: string[] = [];
      for (let k = 0; k < take; k++) ids.push(usable[Math.floor(k * step)].traceID);
      let done = 0;
      let failed = 0;
      const progress = () => mount(note, h('span', { class: 'spin' }), h('span', { class: 'muted' }, ` Reading traces: ${done} / ${ids.length}`));
      progress();
      const edges = new Map<string, Edge>();
      const nodes = new Map<string, { spans: number; errors: number }>();
      const rootServices = new Set<string>();
      await mapLimit(ids, CONCURRENCY, async (id) => {
        try {
          const tr = await getTrace(id, ctl.signal);
          const trace = buildTrace(id, tr.data);
          for (const sp of trace.spans) {
            const n = nodes.get(sp.service) || { spans: 0, errors: 0 };
            n.spans++;
            if (sp.error) n.errors++;
            nodes.set(sp.service, n);
            if (sp.parent < 0) {
              if (!sp.orphan) rootServices.add(sp.service);
              continue;
            }
            const ps = trace.spans[sp.parent];
            if (ps.service === sp.service) continue;
            const key = `${ps.service}\u0000${sp.service}`;
            const e = edges.get(key) || { from: ps.service, to: sp.service, calls: 0, errors: 0 };
            e.calls++;
            if (sp.error) e.errors++;
            edges.set(key, e);
          }
        } catch (e) {
          if ((e as Error).name === 'AbortError') throw e;
          failed++;
        }
        done++;
        if (!ctl.signal.aborted) progress();
      });
      if (ctl.signal.aborted) return;
      const read = ids.length - failed;
      mount(
        note,
        h('span', null, `Sampled from `, h('b', { 'data-testid': 'graph-sample' }, `${read} trace${read === 1 ? '' : 's'}`), ` of ${fmtCount(all.length)}${all.length >= 200 ? '+' : ''} found in ${timeRangeLabel(t).toLowerCase()}.`),
        h(
          'span',
          { class: 'muted' },
          ` Call counts are from the sample, not totals.${skippedBig ? ` ${skippedBig} trace(s) over ${fmtCount(MAX_SPANS_PER_TRACE)} spans left out.` : ''}${failed ? ` ${failed} trace(s) could not be read.` : ''}`,
        ),
      );
      render(Array.from(edges.values()), nodes, rootServices);
    } catch (e) {
      if ((e as Error).name === 'AbortError') return;
      mount(note);
      mount(body, errorBox(e, (e as ApiError).status === 400 ? 'Invalid query' : 'Could not build the graph'));
    } finally {
      if (abort === ctl) refresh.disabled = false;
    }
  }

  function render(edges: Edge[], nodeStats: Map<string, { spans: number; errors: number }>, roots: Set<string>) {
    if (!edges.length && !nodeStats.size) {
      mount(body, emptyState('No spans in the sampled traces', null));
      return;
    }
    const layout = layoutGraph(edges, nodeStats, roots);
    const table = h(
      'table',
      { class: 'results-table edge-table' },
      h('thead', null, h('tr', null, h('th', null, 'Caller'), h('th', null, 'Callee'), h('th', { class: 'c-num' }, 'Calls'), h('th', { class: 'c-num' }, 'Errors'), h('th', { class: 'c-num' }, 'Error rate'))),
      h(
        'tbody',
        null,
        edges
          .slice()
          .sort((a, b) => b.calls - a.calls)
          .map((e) =>
            h(
              'tr',
              { class: e.errors ? 'has-error' : '' },
              h('td', null, h('span', { class: 'swatch', style: `background:${serviceColor(e.from)}` }), e.from),
              h('td', null, h('span', { class: 'swatch', style: `background:${serviceColor(e.to)}` }), e.to),
              h('td', { class: 'c-num' }, fmtCount(e.calls)),
              h('td', { class: 'c-num' }, e.errors ? h('span', { class: 'badge err' }, fmtCount(e.errors)) : '0'),
              h('td', { class: 'c-num' }, `${((e.errors / e.calls) * 100).toFixed(1)}%`),
            ),
          ),
      ),
    );
    mount(
      body,
      h('div', { class: 'card graph-card' }, layout),
      edges.length ? h('div', { class: 'card table-card' }, table) : h('p', { class: 'muted' }, 'No calls between different services in the sampled traces.'),
    );
  }

  // hovering a service highlights its edges; clicking it searches its traces
  body.addEventListener('mouseover', (ev) => {
    const node = (ev.target as Element).closest('[data-testid="graph-node"]');
    const g = body.querySelector('svg.service-graph');
    if (!g) return;
    const name = node?.getAttribute('data-service') ?? null;
    g.classList.toggle('focus', !!name);
    for (const e of g.querySelectorAll('[data-testid="graph-edge"]')) {
      e.classList.toggle('hl', !!name && (e.getAttribute('data-from') === name || e.getAttribute('data-to') === name));
    }
    for (const n of g.querySelectorAll('[data-testid="graph-node"]')) n.classList.toggle('hl', n === node);
  });
  body.addEventListener('click', (ev) => {
    const node = (ev.target as Element).closest('[data-testid="graph-node"]');
    if (!node) return;
    const p = new URLSearchParams();
    p.set('q', `{ resource.service.name = "${(node.getAttribute('data-service') || '').replace(/["\\]/g, '\\$&')}" }`);
    writeTimeRange(p, picker.get());
    navigate(`/search?${p.toString()}`);
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

// --- layout ----------------------------------------------------------------------------------

const NODE_W = 168;
const NODE_H = 46;
const COL_GAP = 120;
const ROW_GAP = 26;
const PAD = 24;

function layoutGraph(edges: Edge[], stats: Map<string, { spans: number; errors: number }>, rootServices: Set<string>): SVGSVGElement {
  const names = Array.from(stats.keys());
  for (const e of edges) for (const n of [e.from, e.to]) if (!stats.has(n)) names.push(n);
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

  // Layers: hop distance (BFS) from the entry services: those no one calls, else the services
  // that own trace root spans, else the one that calls most. Real service graphs have cycles;
  // edges that go back or stay within a layer are drawn as arcs.
  const preds = new Map<string, string[]>();
  for (const n of names) preds.set(n, []);
  for (const e of edges) preds.get(e.to)!.push(e.from);
  let sources = names.filter((n) => indeg.get(n) === 0 && out.get(n)!.length > 0);
  if (!sources.length) sources = names.filter((n) => rootServices.has(n) && out.get(n)!.length > 0);
  if (!sources.length && names.length) sources = [names.slice().sort((a, b) => out.get(b)!.length - out.get(a)!.length)[0]];
  const layer = new Map<string, number>();
  const queue: string[] = [];
  for (const s0 of sources) {
    layer.set(s0, 0);
    queue.push(s0);
  }
  for (let qi = 0; qi < queue.length; qi++) {
    const n = queue[qi];
    for (const k of out.get(n)!) {
      if (!layer.has(k)) {
        layer.set(k, layer.get(n)! + 1);
        queue.push(k);
      }
    }
  }
  // unreachable: isolated services (no cross-service calls) go in a last column of their own
  let maxLayer = 0;
  for (const v of layer.values()) maxLayer = Math.max(maxLayer, v);
  for (const n of names) if (!layer.has(n)) layer.set(n, out.get(n)!.length || preds.get(n)!.length ? 0 : maxLayer + 1);
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

  const maxRows = Math.max(...layers.map((l) => l.length));
  const height = PAD * 2 + maxRows * NODE_H + (maxRows - 1) * ROW_GAP + 30;
  const width = PAD * 2 + layers.length * NODE_W + (layers.length - 1) * COL_GAP + 60;
  const nodes = new Map<string, NodeInfo>();
  layers.forEach((ns, l) => {
    const colH = ns.length * NODE_H + (ns.length - 1) * ROW_GAP;
    const y0 = (height - colH) / 2;
    ns.forEach((n, i) => {
      const st = stats.get(n) || { spans: 0, errors: 0 };
      nodes.set(n, { name: n, spans: st.spans, errors: st.errors, layer: l, order: i, x: PAD + l * (NODE_W + COL_GAP), y: y0 + i * (NODE_H + ROW_GAP) });
    });
  });

  const maxCalls = Math.max(1, ...edges.map((e) => e.calls));
  const root = svg('svg', {
    'data-testid': 'service-graph',
    class: 'service-graph',
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
  for (const e of edges) {
    const a = nodes.get(e.from)!;
    const b = nodes.get(e.to)!;
    let d: string;
    let lx: number;
    let ly: number;
    if (b.layer > a.layer) {
      const x1 = a.x + NODE_W;
      const y1 = a.y + NODE_H / 2 - 4;
      const x2 = b.x - 1;
      const y2 = b.y + NODE_H / 2 - 4;
      const cx = (x1 + x2) / 2;
      d = `M${x1},${y1} C${cx},${y1} ${cx},${y2} ${x2},${y2}`;
      // label near the callee end, where edges fan out less
      lx = x1 + (x2 - x1) * 0.62;
      ly = y1 + (y2 - y1) * 0.62;
    } else if (b.layer === a.layer) {
      // same column: an arc bulging right
      const x1 = a.x + NODE_W;
      const y1 = a.y + NODE_H / 2 + 6;
      const x2 = b.x + NODE_W + 1;
      const y2 = b.y + NODE_H / 2 + 6;
      const bulge = 34 + Math.abs(a.order - b.order) * 10;
      d = `M${x1},${y1} C${x1 + bulge},${y1} ${x2 + bulge},${y2} ${x2},${y2}`;
      lx = x1 + bulge * 0.75;
      ly = (y1 + y2) / 2;
    } else {
      // back to an earlier column: leave from the left, enter from the right, lower half
      const x1 = a.x;
      const y1 = a.y + NODE_H - 10;
      const x2 = b.x + NODE_W + 1;
      const y2 = b.y + NODE_H - 10;
      d = `M${x1},${y1} C${x1 - 50},${y1 + 24} ${x2 + 50},${y2 + 24} ${x2},${y2}`;
      lx = (x1 + x2) / 2;
      ly = (y1 + y2) / 2 + 18;
    }
    const w = 1.2 + (Math.log(1 + e.calls) / Math.log(1 + maxCalls)) * 3.5;
    const cls = e.errors ? 'edge err' : 'edge';
    edgeG.appendChild(
      svg(
        'path',
        {
          d,
          class: cls,
          'stroke-width': w.toFixed(1),
          'marker-end': e.errors ? 'url(#arrow-err)' : 'url(#arrow)',
          'data-testid': 'graph-edge',
          'data-from': e.from,
          'data-to': e.to,
          'data-calls': e.calls,
          'data-errors': e.errors,
        },
        svg('title', null, `${e.from} → ${e.to}\n${e.calls} calls, ${e.errors} errors`),
      ),
    );
    const label = `${fmtCount(e.calls)}${e.errors ? ` · ${fmtCount(e.errors)} err` : ''}`;
    const lw = label.length * 6.4 + 10;
    labelG.appendChild(
      svg(
        'g',
        { class: `edge-label${e.errors ? ' err' : ''}`, transform: `translate(${lx.toFixed(1)},${ly.toFixed(1)})` },
        svg('rect', { x: -lw / 2, y: -9, width: lw, height: 18, rx: 9 }),
        svg('text', { x: 0, y: 4, 'text-anchor': 'middle' }, label),
      ),
    );
  }
  root.appendChild(edgeG);
  const nodeG = svg('g', { class: 'nodes' });
  for (const n of nodes.values()) {
    const label = n.name.length > 22 ? `${n.name.slice(0, 21)}…` : n.name;
    nodeG.appendChild(
      svg(
        'g',
        { class: `node${n.errors ? ' err' : ''}`, transform: `translate(${n.x},${n.y})`, 'data-testid': 'graph-node', 'data-service': n.name },
        svg('title', null, `${n.name}\n${n.spans} spans in sample, ${n.errors} errors\nClick to search its traces`),
        svg('rect', { width: NODE_W, height: NODE_H, rx: 8 }),
        svg('rect', { width: 6, height: NODE_H, rx: 3, fill: serviceColor(n.name), class: 'node-stripe' }),
        svg('text', { x: 16, y: 19, class: 'node-name' }, label),
        svg('text', { x: 16, y: 35, class: 'node-sub' }, `${fmtCount(n.spans)} spans${n.errors ? ` · ${fmtCount(n.errors)} err` : ''}`),
      ),
    );
  }
  root.appendChild(labelG);
  root.appendChild(nodeG);
  return root;
}
