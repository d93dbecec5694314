// The trace page's other views: statistics (Jaeger UI's Trace Statistics), a flame graph of the
// merged service+operation paths, and the services of the trace with the calls between them.
// Each view reads its state from the URL (`?view=stats&group=service&sub=operation&sort=total:desc`,
// `?view=flame&focus=<path>`, `?view=graph`) and is built once, on first show.

import { GroupBy, PathNode, StatRow, attributeKeys, groupLabel, pathOf, pathTree, traceGraph, traceStats } from '../analysis';
import { h, mount, svg } from '../dom';
import { Trace } from '../model';
import { fmtCount, fmtDuration, serviceColor } from '../util';

export interface ViewHost {
  t: Trace;
  /** each span's self time, ns (computed once, on first use) */
  selfNs(): Float64Array;
  /** changes the URL's query (replaced, or a new history entry with `push`) */
  setParams(change: (p: URLSearchParams) => void, push?: boolean): void;
}

export interface SubView {
  el: HTMLElement;
  /** shows the state of the URL's query; cheap when it did not change */
  update(p: URLSearchParams): void;
}

/** Marks the view rendered, with how long it took (read by the tests). */
function rendered(el: HTMLElement, t0: number) {
  el.setAttribute('data-render-ms', String(Math.round(performance.now() - t0)));
  el.setAttribute('data-ready', '1');
}

// --- statistics --------------------------------------------------------------------------------

interface Column {
  key: string;
  label: string;
  title: string;
  get(r: StatRow): number;
  fmt(v: number): string;
}

/** Rows shown until "Show all": a table of thousands of rows takes longer to lay out than all
 * of the statistics take to compute (1,100 rows of the 100,000-span trace in trace-views.test.mjs). */
const FIRST_ROWS = 500;

export function statsView(host: ViewHost): SubView {
  const t = host.t;
  const total = t.durationNs || 1;
  const pct = (v: number) => `${(Math.round(v * 100) / 100).toFixed(2)}%`;
  const columns: Column[] = [
    { key: 'count', label: 'Count', title: 'Number of spans', get: (r) => r.count, fmt: fmtCount },
    { key: 'total', label: 'Total', title: 'Summed duration', get: (r) => r.total, fmt: fmtDuration },
    { key: 'avg', label: 'Avg', title: 'Average duration', get: (r) => r.total / r.count, fmt: fmtDuration },
    { key: 'min', label: 'Min', title: 'Shortest duration', get: (r) => r.min, fmt: fmtDuration },
    { key: 'max', label: 'Max', title: 'Longest duration', get: (r) => r.max, fmt: fmtDuration },
    { key: 'self', label: 'Self total', title: 'Summed self time: a span’s duration less the time its children cover', get: (r) => r.selfTotal, fmt: fmtDuration },
    { key: 'selfavg', label: 'Self avg', title: 'Average self time', get: (r) => r.selfTotal / r.count, fmt: fmtDuration },
    { key: 'selfmin', label: 'Self min', title: 'Shortest self time', get: (r) => r.selfMin, fmt: fmtDuration },
    { key: 'selfmax', label: 'Self max', title: 'Longest self time', get: (r) => r.selfMax, fmt: fmtDuration },
    { key: 'selfpct', label: 'Self %', title: 'Summed self time as a share of the trace’s duration', get: (r) => (r.selfTotal / total) * 100, fmt: pct },
  ];
  let keys: { key: string; spans: number }[] | null = null;
  const groupSel = h('select', { class: 'input', 'aria-label': 'Group by', 'data-testid': 'stats-group' });
  const subSel = h('select', { class: 'input', 'aria-label': 'Then by', 'data-testid': 'stats-sub' });
  const note = h('span', { class: 'muted small', 'data-testid': 'stats-note' });
  const tableBox = h('div', { class: 'card table-card stats-table-box' });
  const el = h(
    'div',
    { class: 'trace-view stats-view', 'data-testid': 'stats-view' },
    h(
      'div',
      { class: 'view-controls' },
      h('label', { class: 'field inline' }, h('span', { class: 'field-label' }, 'Group by'), groupSel),
      h('label', { class: 'field inline' }, h('span', { class: 'field-label' }, 'then by'), subSel),
      h('span', { class: 'spacer' }),
      note,
    ),
    tableBox,
  );
  const options = (sel: HTMLSelectElement, none: boolean) => {
    keys ||= attributeKeys(t);
    mount(
      sel,
      none ? h('option', { value: '' }, 'Nothing') : null,
      h('option', { value: 'service' }, 'Service'),
      h('option', { value: 'operation' }, 'Operation'),
      keys.length ? h('optgroup', { label: 'Attribute' }, keys.map((k) => h('option', { value: `attr:${k.key}` }, `${k.key} (${fmtCount(k.spans)})`))) : null,
    );
  };
  groupSel.addEventListener('change', () => {
    host.setParams((p) => p.set('group', groupSel.value));
    show(true);
  });
  subSel.addEventListener('change', () => {
    host.setParams((p) => (subSel.value ? p.set('sub', subSel.value) : p.delete('sub')));
    show(true);
  });
  let state = { by: '', sub: '', sort: '', desc: true };
  let showAll = false;
  let last = '';

  const show = (fromControls = false) => {
    if (fromControls) read(new URLSearchParams(location.search));
    const key = `${state.by}|${state.sub}|${state.sort}|${state.desc}`;
    if (key === last) return;
    last = key;
    const t0 = performance.now();
    const rows = traceStats(t, host.selfNs(), state.by, state.sub || null);
    const col = columns.find((c) => c.key === state.sort);
    const dir = state.desc ? -1 : 1;
    const cmp = col ? (a: StatRow, b: StatRow) => dir * (col.get(a) - col.get(b)) || a.value.localeCompare(b.value) : (a: StatRow, b: StatRow) => dir * a.value.localeCompare(b.value);
    rows.sort(cmp);
    for (const r of rows) r.children?.sort(cmp);
    renderTable(rows);
    rendered(el, t0);
  };

  const read = (p: URLSearchParams) => {
    const by = p.get('group') || 'service';
    const sub = p.get('sub') || '';
    const [sort, d] = (p.get('sort') || 'total:desc').split(':');
    state = { by, sub: sub === by ? '' : sub, sort: sort === 'name' || columns.some((c) => c.key === sort) ? sort : 'total', desc: d !== 'asc' };
    if (!groupSel.options.length) {
      options(groupSel, false);
      options(subSel, true);
    }
    ensureOption(groupSel, by);
    ensureOption(subSel, state.sub);
    groupSel.value = by;
    subSel.value = state.sub;
  };

  const renderTable = (rows: StatRow[]) => {
    const th = (key: string, label: string, title: string, num: boolean) => {
      const sorted = state.sort === key;
      return h(
        'th',
        { class: `sortable${num ? ' c-num' : ''}${sorted ? ' sorted' : ''}`, 'data-sort': key, title, 'aria-sort': sorted ? (state.desc ? 'descending' : 'ascending') : 'none' },
        label,
        sorted ? h('span', { class: 'sort-ind' }, state.desc ? '▼' : '▲') : null,
      );
    };
    const head = h('tr', null, th('name', state.sub ? `${groupLabel(state.by)} › ${groupLabel(state.sub)}` : groupLabel(state.by), 'Sort by name', false), columns.map((c) => th(c.key, c.label, c.title, true)));
    const body = h('tbody');
    let shown = 0;
    let all = 0;
    const limit = showAll ? Infinity : FIRST_ROWS;
    const row = (r: StatRow, level: number, parent: string) => {
      all++;
      if (shown >= limit) return;
      shown++;
      const color = (level === 1 ? state.by : state.sub) === 'service' ? serviceColor(r.value) : '';
      body.appendChild(
        h(
          'tr',
          { class: `stat-row l${level}`, 'data-testid': 'stat-row', 'data-level': level, 'data-group': r.value, 'data-parent-group': parent || null },
          h('td', { class: 'stat-name', title: r.value }, color ? h('span', { class: 'swatch', style: `background:${color}` }) : null, r.value || h('span', { class: 'muted' }, '(empty)')),
          columns.map((c) => {
            const v = c.get(r);
            return h('td', { class: 'c-num', 'data-col': c.key, 'data-value': v }, c.fmt(v));
          }),
        ),
      );
    };
    for (const r of rows) {
      row(r, 1, '');
      if (r.children) for (const c of r.children) row(c, 2, r.value);
    }
    mount(
      note,
      `${fmtCount(rows.length)} group${rows.length === 1 ? '' : 's'} over ${fmtCount(t.spans.length)} spans`,
      shown < all ? [` · the first ${fmtCount(shown)} of ${fmtCount(all)} rows `, h('button', { class: 'btn small', type: 'button', 'data-testid': 'stats-show-all', onclick: () => {
        showAll = true;
        last = '';
        show();
      } }, 'Show all')] : null,
    );
    const table = h('table', { class: 'results-table stats-table', 'data-testid': 'stats-table' }, h('thead', null, head), body);
    table.addEventListener('click', (ev) => {
      const th = (ev.target as Element).closest('th[data-sort]');
      if (!th) return;
      const key = th.getAttribute('data-sort')!;
      const desc = state.sort === key ? !state.desc : key !== 'name';
      host.setParams((p) => p.set('sort', `${key}:${desc ? 'desc' : 'asc'}`));
      show(true);
    });
    mount(tableBox, table);
  };

  return {
    el,
    update(p) {
      read(p);
      show();
    },
  };
}

/** A select offers a value from the URL even when the trace has no such attribute. */
function ensureOption(sel: HTMLSelectElement, value: string) {
  if (!value || Array.from(sel.options).some((o) => o.value === value)) return;
  sel.appendChild(h('option', { value }, groupLabel(value as GroupBy)));
}

// --- flame graph -------------------------------------------------------------------------------

const FLAME_ROW = 22;
const MAX_FLAME_NODES = 6000;

export function flameView(host: ViewHost): SubView {
  const t = host.t;
  let tree: PathNode | null = null;
  const crumbs = h('div', { class: 'flame-crumbs', 'data-testid': 'flame-crumbs' });
  const box = h('div', { class: 'flame', 'data-testid': 'flame' });
  const el = h(
    'div',
    { class: 'trace-view flame-view', 'data-testid': 'flame-view' },
    h(
      'div',
      { class: 'view-controls' },
      crumbs,
      h('span', { class: 'spacer' }),
      h('span', { class: 'muted small' }, 'Spans with the same service and operation under the same path are merged. Width is the self time of the spans at and under a node, as flamegraph.pl folds stacks. Click to zoom in.'),
    ),
    h('div', { class: 'card flame-card' }, box),
  );
  let focus = '';
  let lastKey = '';

  /** a node's self time plus its descendants': what its width stands for */
  const weight = new Map<PathNode, number>();
  const build = () => {
    if (tree) return tree;
    tree = pathTree(t, host.selfNs());
    const post: PathNode[] = [];
    const stack = [tree];
    while (stack.length) {
      const n = stack.pop()!;
      post.push(n);
      for (const c of n.children) stack.push(c);
    }
    for (let k = post.length - 1; k >= 0; k--) {
      const n = post[k];
      let w = n.depth < 0 ? 0 : n.self;
      for (const c of n.children) w += weight.get(c)!;
      weight.set(n, w);
    }
    return tree;
  };
  /** The node at a path ("service: operation › …"), found by walking down from the root. */
  const find = (root: PathNode, path: string): PathNode | undefined => {
    let n: PathNode | undefined = root;
    for (const part of path.split(' › ')) {
      const k: number = part.indexOf(': ');
      n = n && n.children.find((c) => c.service === part.slice(0, k) && c.name === part.slice(k + 2));
    }
    return n;
  };

  const render = () => {
    const W = box.clientWidth;
    const key = `${focus}|${W}`;
    if (key === lastKey || !W) return;
    lastKey = key;
    const t0 = performance.now();
    const root = build();
    let top = (focus && find(root, focus)) || root;
    // a single root is drawn as the top bar itself
    if (top === root && root.children.length === 1) top = root.children[0];
    // breadcrumbs: the focused node's ancestors
    const chain: PathNode[] = [];
    for (let n: PathNode | null = top; n && n !== root; n = n.parent) chain.unshift(n);
    mount(
      crumbs,
      top !== root && (focus || root.children.length > 1)
        ? h('button', { class: 'btn small', type: 'button', 'data-path': '', 'data-testid': 'flame-reset' }, 'Whole trace')
        : null,
      chain.length > 1 || focus ? chain.map((n, k) => [k ? h('span', { class: 'muted' }, ' › ') : null, h('button', { class: 'crumb', type: 'button', 'data-path': pathOf(n) }, `${n.service}: ${n.name}`)]) : null,
    );

    const frag = document.createDocumentFragment();
    let count = 0;
    let maxDepth = 0;
    const d0 = top.depth;
    const stack: [PathNode, number, number][] = [[top, 0, W]];
    while (stack.length && count < MAX_FLAME_NODES) {
      const [n, x, w] = stack.pop()!;
      const depth = n.depth - d0;
      if (depth > maxDepth) maxDepth = depth;
      count++;
      const isRoot = n === root;
      const label = isRoot ? `All root spans (${fmtCount(n.count)})` : `${n.service}: ${n.name}`;
      frag.appendChild(
        h(
          'div',
          {
            class: `fl-node${n.errors ? ' err' : ''}${w < 28 ? ' narrow' : ''}`,
            'data-testid': 'flame-node',
            'data-path': isRoot ? '' : pathOf(n),
            'data-service': n.service,
            'data-name': n.name,
            'data-count': n.count,
            'data-total-ns': n.total,
            'data-weight-ns': weight.get(n)!,
            'data-depth': depth,
            style: `left:${x}px;top:${depth * FLAME_ROW}px;width:${Math.max(1, w - 1)}px;--c:${isRoot ? '#9aa5b1' : serviceColor(n.service)}`,
            title: `${label}\n${fmtCount(n.count)} span${n.count === 1 ? '' : 's'} · duration ${fmtDuration(n.total)} · self ${fmtDuration(n.self)} · self here and below ${fmtDuration(weight.get(n)!)}${n.errors ? ` · ${fmtCount(n.errors)} error${n.errors === 1 ? '' : 's'}` : ''}`,
          },
          w >= 28 ? label : null,
        ),
      );
      // children split the parent's width by their weight; the rest is the parent's own time
      const denom = weight.get(n)! || 1;
      let cx = x;
      for (const c of n.children) {
        const cw = (w * weight.get(c)!) / denom;
        if (cw >= 0.5) stack.push([c, cx, cw]);
        cx += cw;
      }
    }
    box.style.height = `${(maxDepth + 1) * FLAME_ROW}px`;
    mount(box, frag);
    rendered(el, t0);
  };

  const onClick = (ev: MouseEvent) => {
    const target = (ev.target as Element).closest('[data-path]');
    if (!target) return;
    const path = target.getAttribute('data-path') || '';
    if (path === focus) return;
    focus = path;
    host.setParams((p) => (path ? p.set('focus', path) : p.delete('focus')), true);
    render();
  };
  box.addEventListener('click', onClick);
  crumbs.addEventListener('click', onClick);
  if (typeof ResizeObserver !== 'undefined') new ResizeObserver(() => el.isConnected && render()).observe(box);

  return {
    el,
    update(p) {
      focus = p.get('focus') || '';
      render();
    },
  };
}

// --- services of the trace ---------------------------------------------------------------------

const NODE_W = 180;
const NODE_H = 44;
const COL_GAP = 120;
const ROW_GAP = 22;
const PAD = 20;

export function traceGraphView(host: ViewHost): SubView {
  const t = host.t;
  const el = h('div', { class: 'trace-view trace-graph-view', 'data-testid': 'trace-graph-view' });
  let done = false;
  return {
    el,
    update() {
      if (done) return;
      done = true;
      const t0 = performance.now();
      const g = traceGraph(t);
      const rootService = t.spans[t.root].service;
      // columns: calls away from the root's service (breadth first); the rest after
      const col = new Map<string, number>([[rootService, 0]]);
      const out = new Map<string, string[]>();
      for (const e of g.edges) {
        const l = out.get(e.from);
        if (l) l.push(e.to);
        else out.set(e.from, [e.to]);
      }
      const queue = [rootService];
      while (queue.length) {
        const s = queue.shift()!;
        for (const n of out.get(s) || []) {
          if (!col.has(n)) {
            col.set(n, col.get(s)! + 1);
            queue.push(n);
          }
        }
      }
      const layers: string[][] = [];
      for (const s of g.services.slice().sort((a, b) => b.spans - a.spans)) {
        const c = col.get(s.name) ?? 0;
        (layers[c] ||= []).push(s.name);
      }
      const pos = new Map<string, { x: number; y: number }>();
      let height = 0;
      layers.forEach((names, c) => {
        names.forEach((n, r) => pos.set(n, { x: PAD + c * (NODE_W + COL_GAP), y: PAD + r * (NODE_H + ROW_GAP) }));
        height = Math.max(height, PAD * 2 + names.length * (NODE_H + ROW_GAP) - ROW_GAP);
      });
      const width = PAD * 2 + layers.length * (NODE_W + COL_GAP) - COL_GAP;
      const maxCalls = Math.max(1, ...g.edges.map((e) => e.calls));
      const edges = g.edges.map((e) => {
        const a = pos.get(e.from)!;
        const b = pos.get(e.to)!;
        const back = b.x <= a.x;
        const x1 = back ? a.x + NODE_W / 2 : a.x + NODE_W;
        const y1 = back ? a.y + NODE_H : a.y + NODE_H / 2;
        const x2 = back ? b.x + NODE_W / 2 : b.x;
        const y2 = back ? b.y + NODE_H : b.y + NODE_H / 2;
        const d = back ? `M${x1},${y1} C${x1},${y1 + 60} ${x2},${y2 + 60} ${x2},${y2}` : `M${x1},${y1} C${x1 + COL_GAP / 2},${y1} ${x2 - COL_GAP / 2},${y2} ${x2},${y2}`;
        const lx = back ? (x1 + x2) / 2 : (x1 + x2) / 2;
        const ly = back ? Math.max(y1, y2) + 46 : (y1 + y2) / 2 - 6;
        return svg(
          'g',
          { class: `tg-edge${e.errors ? ' err' : ''}`, 'data-testid': 'trace-graph-edge', 'data-from': e.from, 'data-to': e.to, 'data-calls': e.calls, 'data-errors': e.errors },
          svg('path', { d, 'stroke-width': 1.5 + (3 * e.calls) / maxCalls, 'marker-end': 'url(#tg-arrow)' }),
          svg('text', { x: lx, y: ly, 'text-anchor': 'middle' }, `${fmtCount(e.calls)} call${e.calls === 1 ? '' : 's'}${e.errors ? ` · ${fmtCount(e.errors)} err` : ''}`),
          svg('title', null, `${e.from} → ${e.to}: ${fmtCount(e.calls)} calls, ${fmtCount(e.errors)} errors, ${fmtDuration(e.total)} in total`),
        );
      });
      const nodes = g.services.map((s) => {
        const p = pos.get(s.name)!;
        return svg(
          'g',
          { class: `tg-node${s.errors ? ' err' : ''}`, 'data-testid': 'trace-graph-node', 'data-service': s.name, 'data-spans': s.spans, 'data-errors': s.errors, transform: `translate(${p.x},${p.y})` },
          svg('rect', { width: NODE_W, height: NODE_H, rx: 6, style: `--c:${serviceColor(s.name)}` }),
          svg('rect', { width: 5, height: NODE_H, rx: 2, class: 'tg-stripe', fill: serviceColor(s.name) }),
          svg('text', { x: 14, y: 18, class: 'tg-name' }, s.name.length > 24 ? `${s.name.slice(0, 23)}…` : s.name),
          svg('text', { x: 14, y: 34, class: 'tg-sub' }, `${fmtCount(s.spans)} span${s.spans === 1 ? '' : 's'}${s.errors ? ` · ${fmtCount(s.errors)} errors` : ''}`),
          svg('title', null, s.name),
        );
      });
      const chart = svg(
        'svg',
        { class: 'tg-svg', width, height, viewBox: `0 0 ${width} ${height}` },
        svg('defs', null, svg('marker', { id: 'tg-arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' }, svg('path', { d: 'M0,0 L10,5 L0,10 z', class: 'tg-arrowhead' }))),
        edges,
        nodes,
      );
      const rows = g.edges.slice().sort((a, b) => b.calls - a.calls || a.from.localeCompare(b.from));
      const table = h(
        'table',
        { class: 'results-table', 'data-testid': 'trace-graph-table' },
        h('thead', null, h('tr', null, h('th', null, 'Caller'), h('th', null, 'Callee'), h('th', { class: 'c-num' }, 'Calls'), h('th', { class: 'c-num' }, 'Errors'), h('th', { class: 'c-num' }, 'Total time'), h('th', { class: 'c-num' }, 'Avg'))),
        h(
          'tbody',
          null,
          rows.map((e) =>
            h(
              'tr',
              { 'data-testid': 'trace-graph-row', 'data-from': e.from, 'data-to': e.to },
              h('td', null, h('span', { class: 'swatch', style: `background:${serviceColor(e.from)}` }), ' ', e.from),
              h('td', null, h('span', { class: 'swatch', style: `background:${serviceColor(e.to)}` }), ' ', e.to),
              h('td', { class: 'c-num' }, fmtCount(e.calls)),
              h('td', { class: 'c-num' }, e.errors ? h('span', { class: 'badge err' }, fmtCount(e.errors)) : '0'),
              h('td', { class: 'c-num' }, fmtDuration(e.total)),
              h('td', { class: 'c-num' }, fmtDuration(e.total / e.calls)),
            ),
          ),
        ),
      );
      mount(
        el,
        h('div', { class: 'view-controls' }, h('span', { class: 'muted small' }, `${fmtCount(g.services.length)} service${g.services.length === 1 ? '' : 's'}, ${fmtCount(g.edges.length)} caller → callee pair${g.edges.length === 1 ? '' : 's'}. A call is a span whose parent is in another service.`)),
        h('div', { class: 'card tg-card' }, chart),
        g.edges.length ? h('div', { class: 'card table-card' }, table) : h('p', { class: 'muted' }, 'Every span of this trace is in one service: there are no calls between services.'),
      );
      rendered(el, t0);
    },
  };
}
