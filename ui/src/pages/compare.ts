// Compare page (/compare?a=<id>&b=<id>, as Jaeger UI's Compare): the two traces' trees of
// service+operation paths, merged, with the nodes only in A, only in B, and in both with their
// span counts and durations side by side. `diff=1` shows only the nodes that differ.

import { ApiError, search } from '../api';
import { PathNode, childOf, pathOf, pathTree } from '../analysis';
import { emptyState, errorBox } from '../components';
import { h, mount, spinner } from '../dom';
import { loadTrace } from '../formats';
import { Trace, buildTrace, selfTimes } from '../model';
import { Page, navigate, replaceUrl } from '../router';
import { fmtCount, fmtDateTime, fmtDuration, nsStringToMs, serviceColor } from '../util';

/** A node of the merged tree: the same path in A, in B, or in both. */
export interface DiffNode {
  service: string;
  name: string;
  depth: number;
  a: PathNode | null;
  b: PathNode | null;
  /** this node or one below it differs (only on one side, or another span count) */
  differs: boolean;
  children: DiffNode[];
}

/** Merges two path trees; children keep A's order, then B's new ones. */
export function diffTrees(a: PathNode | null, b: PathNode | null): DiffNode {
  const ref = (a || b)!;
  const node: DiffNode = { service: ref.service, name: ref.name, depth: ref.depth, a, b, differs: !a || !b || a.count !== b.count, children: [] };
  for (const ca of a?.children || []) node.children.push(diffTrees(ca, b ? childOf(b, ca.service, ca.name) || null : null));
  for (const cb of b?.children || []) if (!a || !childOf(a, cb.service, cb.name)) node.children.push(diffTrees(null, cb));
  for (const c of node.children) if (c.differs) node.differs = true;
  return node;
}

const MAX_ROWS = 3000;

export function comparePage(url: URL): Page {
  const el = h('div', { class: 'page page-pad compare-page' });
  const inA = h('input', { class: 'input mono', placeholder: 'Trace ID A', 'aria-label': 'Trace A', 'data-testid': 'compare-a', spellcheck: 'false' });
  const inB = h('input', { class: 'input mono', placeholder: 'Trace ID B', 'aria-label': 'Trace B', 'data-testid': 'compare-b', spellcheck: 'false' });
  const onlyDiff = h('input', { type: 'checkbox', 'data-testid': 'compare-only-diff' });
  const form = h(
    'form',
    { class: 'compare-form card' },
    h('span', { class: 'cmp-badge a' }, 'A'),
    inA,
    h('span', { class: 'cmp-badge b' }, 'B'),
    inB,
    h('button', { class: 'btn primary', type: 'submit', 'data-testid': 'compare-run' }, 'Compare'),
    h('span', { class: 'spacer' }),
    h('label', { class: 'check' }, onlyDiff, ' Only differences'),
  );
  const out = h('div', { class: 'compare-out' });
  mount(el, h('h1', { class: 'page-title' }, 'Compare traces'), form, out);
  const clean = (s: string) => s.trim().replace(/^.*\/trace\//, '').replace(/[?#].*$/, '').toLowerCase();
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    if (clean(inA.value)) p.set('a', clean(inA.value));
    if (clean(inB.value)) p.set('b', clean(inB.value));
    if (onlyDiff.checked) p.set('diff', '1');
    navigate(`/compare?${p}`);
  });
  let abort: AbortController | null = null;
  let loaded: { a: string; b: string; ta: Trace; tb: Trace; tree: DiffNode } | null = null;

  const show = (u: URL) => {
    document.title = 'Compare · weft';
    const a = clean(u.searchParams.get('a') || '');
    const b = clean(u.searchParams.get('b') || '');
    inA.value = a;
    inB.value = b;
    onlyDiff.checked = u.searchParams.get('diff') === '1';
    if (!a || !b) {
      mount(
        out,
        emptyState(
          'Pick two traces',
          h('div', { class: 'help' }, h('p', null, 'Paste two trace IDs (or trace links). The comparison merges the two traces by their service and operation paths and marks what only one of them has.')),
          'compare-empty',
        ),
      );
      if (a) {
        inB.focus();
        void suggest(a);
      } else inA.focus();
      return;
    }
    if (loaded && loaded.a === a && loaded.b === b) {
      render(loaded.ta, loaded.tb, loaded.tree);
      return;
    }
    abort?.abort();
    const ctl = (abort = new AbortController());
    mount(out, spinner('Loading both traces…'));
    Promise.all([loadTrace(a, ctl.signal), loadTrace(b, ctl.signal)])
      .then(([ra, rb]) => {
        if (ctl.signal.aborted) return;
        const ta = buildTrace(a, ra.data);
        const tb = buildTrace(b, rb.data);
        const tree = diffTrees(pathTree(ta, selfTimes(ta)), pathTree(tb, selfTimes(tb)));
        loaded = { a, b, ta, tb, tree };
        render(ta, tb, tree);
      })
      .catch((e: unknown) => {
        if ((e as Error).name === 'AbortError') return;
        const status = (e as ApiError).status;
        mount(out, errorBox(e, status === 404 ? 'A trace was not found' : 'Could not load the traces'));
      });
  };

  /** With only A picked: the traces of the same root service and operation from the hour around
   * it, to pick B from (as Jaeger UI compares traces picked from search results). */
  const suggest = async (a: string) => {
    abort?.abort();
    const ctl = (abort = new AbortController());
    const box = h('div', { class: 'cmp-suggest', 'data-testid': 'compare-suggestions' }, spinner('Looking for similar traces…'));
    out.appendChild(box);
    try {
      const ta = buildTrace(a, (await loadTrace(a, ctl.signal)).data);
      const r = ta.spans[ta.root];
      if (!r) return;
      const sec = Math.floor(ta.startMs / 1000);
      const q = `{ rootServiceName = ${JSON.stringify(r.service)} && rootName = ${JSON.stringify(r.name)} }`;
      const res = await search({ q, start: sec - 3600, end: sec + 3600, limit: 21, spss: 1 }, ctl.signal);
      if (ctl.signal.aborted) return;
      const others = (res.traces || []).filter((x) => x.traceID !== a).slice(0, 20);
      mount(
        box,
        h('h2', { class: 'open-list-title' }, `Compare with another ${r.service}: ${r.name}`),
        others.length
          ? h(
              'ul',
              { class: 'open-list' },
              others.map((x) =>
                h(
                  'li',
                  null,
                  h('a', { href: `/compare?a=${a}&b=${x.traceID}`, 'data-testid': 'compare-suggestion', 'data-trace-id': x.traceID }, h('code', null, x.traceID)),
                  h('span', { class: 'muted' }, ` ${fmtDateTime(nsStringToMs(x.startTimeUnixNano))} · ${fmtDuration((x.durationMs || 0) * 1e6)}`),
                ),
              ),
            )
          : h('p', { class: 'muted' }, 'weft holds no other trace of this root service and operation in the hour around this one.'),
      );
    } catch (e) {
      if ((e as Error).name !== 'AbortError') box.remove();
    }
  };

  onlyDiff.addEventListener('change', () => {
    const p = new URLSearchParams(location.search);
    if (onlyDiff.checked) p.set('diff', '1');
    else p.delete('diff');
    replaceUrl(`/compare?${p}`);
    if (loaded) render(loaded.ta, loaded.tb, loaded.tree);
  });

  const render = (ta: Trace, tb: Trace, tree: DiffNode) => {
    let onlyA = 0;
    let onlyB = 0;
    let counts = 0;
    const rows: DiffNode[] = [];
    const stack: DiffNode[] = tree.children.slice().reverse();
    while (stack.length) {
      const n = stack.pop()!;
      if (!n.a) onlyB++;
      else if (!n.b) onlyA++;
      else if (n.a.count !== n.b.count) counts++;
      if (!onlyDiff.checked || n.differs) rows.push(n);
      for (let k = n.children.length - 1; k >= 0; k--) stack.push(n.children[k]);
    }
    const same = !onlyA && !onlyB && !counts;
    const head = (label: string, t: Trace, cls: string) => {
      const r = t.spans[t.root];
      return h(
        'a',
        { class: 'cmp-trace card', href: `/trace/${t.id}`, 'data-testid': `compare-trace-${cls}` },
        h('span', { class: `cmp-badge ${cls}` }, label),
        h('span', { class: 'swatch', style: `background:${r ? serviceColor(r.service) : '#999'}` }),
        h('b', null, r ? r.service : '–'),
        h('span', null, r ? r.name : ''),
        h('span', { class: 'muted' }, `${fmtCount(t.spans.length)} spans · ${fmtDuration(t.durationNs)}`),
        h('code', { class: 'muted small' }, t.id.slice(0, 16)),
      );
    };
    const summary = same
      ? h('div', { class: 'callout info', 'data-testid': 'compare-summary', 'data-same': 'true' }, h('b', null, 'No difference in structure: '), 'every service and operation path has the same number of spans in both traces.')
      : h(
          'div',
          { class: 'callout warn', 'data-testid': 'compare-summary', 'data-same': 'false' },
          h('b', null, 'The traces differ: '),
          h('span', { class: 'cmp-only a' }, `${fmtCount(onlyA)} only in A`),
          ' · ',
          h('span', { class: 'cmp-only b' }, `${fmtCount(onlyB)} only in B`),
          ' · ',
          `${fmtCount(counts)} with other span counts`,
        );
    const dCell = (d: number, fmt: (v: number) => string, testid: string) =>
      h('td', { class: `c-num delta${d > 0 ? ' up' : d < 0 ? ' down' : ''}`, 'data-col': testid, 'data-value': d }, d === 0 ? '–' : `${d > 0 ? '+' : '−'}${fmt(Math.abs(d))}`);
    const avg = (n: PathNode | null) => (n ? n.total / n.count : 0);
    const body = h('tbody');
    for (const n of rows.slice(0, MAX_ROWS)) {
      const state = !n.a ? 'b' : !n.b ? 'a' : 'both';
      const path = pathOf((n.a || n.b)!);
      const ca = n.a?.count ?? 0;
      const cb = n.b?.count ?? 0;
      body.appendChild(
        h(
          'tr',
          { class: `cmp-row s-${state}${state === 'both' && ca !== cb ? ' changed' : ''}`, 'data-testid': 'cmp-node', 'data-path': path, 'data-state': state, 'data-count-a': ca, 'data-count-b': cb },
          h(
            'td',
            { class: 'cmp-name', style: `padding-left:${12 + n.depth * 16}px`, title: path },
            h('span', { class: `cmp-mark ${state}` }, state === 'a' ? '−' : state === 'b' ? '+' : ''),
            h('span', { class: 'swatch', style: `background:${serviceColor(n.service)}` }),
            h('b', null, n.service),
            ' ',
            n.name,
          ),
          h('td', { class: 'c-num' }, n.a ? fmtCount(ca) : '–'),
          h('td', { class: 'c-num' }, n.b ? fmtCount(cb) : '–'),
          dCell(cb - ca, fmtCount, 'count-delta'),
          h('td', { class: 'c-num' }, n.a ? fmtDuration(avg(n.a)) : '–'),
          h('td', { class: 'c-num' }, n.b ? fmtDuration(avg(n.b)) : '–'),
          n.a && n.b ? dCell(avg(n.b) - avg(n.a), fmtDuration, 'avg-delta') : h('td', { class: 'c-num', 'data-col': 'avg-delta', 'data-value': 0 }, ''),
        ),
      );
    }
    const table = h(
      'table',
      { class: 'results-table compare-table', 'data-testid': 'compare-table' },
      h(
        'thead',
        null,
        h('tr', null, h('th', null, 'Service · operation path'), h('th', { class: 'c-num' }, 'Spans A'), h('th', { class: 'c-num' }, 'Spans B'), h('th', { class: 'c-num' }, 'Δ spans'), h('th', { class: 'c-num' }, 'Avg A'), h('th', { class: 'c-num' }, 'Avg B'), h('th', { class: 'c-num' }, 'Δ avg')),
      ),
      body,
    );
    mount(
      out,
      h('div', { class: 'cmp-heads' }, head('A', ta, 'a'), head('B', tb, 'b')),
      summary,
      rows.length ? h('div', { class: 'card table-card' }, table) : h('p', { class: 'muted' }, 'Nothing differs.'),
      rows.length > MAX_ROWS ? h('p', { class: 'muted' }, `The first ${fmtCount(MAX_ROWS)} of ${fmtCount(rows.length)} nodes are shown; tick “Only differences” to see what differs.`) : null,
    );
  };

  show(url);
  return {
    el,
    update(u) {
      show(u);
      return true;
    },
    destroy() {
      abort?.abort();
    },
  };
}
