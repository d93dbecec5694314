// Line charts of metrics over time (the RED view): series drawn as the server returned them (a
// step without a value is a gap), exemplars as dots that open their trace, a crosshair with
// the values under the pointer, and sparklines for tables. Every drawn point is on its path's
// data-points attribute ("timestampMs:value;…"), so tests read what the user sees.

import { h, svg } from './dom';
import { fmtTime, niceTicks, timeTicks } from './util';

export interface ChartSeries {
  name: string;
  color: string;
  /** [Unix ms, value], in time order */
  points: [number, number][];
}

export interface ChartExemplar {
  t: number;
  v: number;
  traceId: string;
  spanId?: string;
  color: string;
}

export interface LineChartOptions {
  title: string;
  testid: string;
  series: ChartSeries[];
  exemplars?: ChartExemplar[];
  startMs: number;
  endMs: number;
  stepMs: number;
  fmt: (v: number) => string;
  /** Called with the step under a click (its start, Unix ms). */
  onPick?: (t: number) => void;
  /** Called with an exemplar clicked (or Enter on it). */
  onExemplar?: (e: ChartExemplar) => void;
  /** Query the chart draws, for the reader (title tooltip) and tests. */
  query?: string;
}

const H = 190;
const ML = 58;
const MR = 14;
const MT = 10;
const MB = 24;

/** A chart card: title, legend and the SVG, drawn at `width` pixels. */
export function lineChart(o: LineChartOptions, width: number): HTMLElement {
  const pw = Math.max(80, width - ML - MR);
  const ph = H - MT - MB;
  let top = 0;
  for (const s of o.series) for (const [, v] of s.points) top = Math.max(top, v);
  for (const e of o.exemplars || []) top = Math.max(top, e.v);
  const ticks = niceTicks(0, top > 0 ? top * 1.08 : 1, 4);
  const yMax = Math.max(ticks[ticks.length - 1], top) || 1;
  const xs = (t: number) => ML + ((t - o.startMs) / Math.max(1, o.endMs - o.startMs)) * pw;
  const ys = (v: number) => MT + ph - (v / yMax) * ph;

  const root = svg('svg', { class: 'line-chart', width, height: H, viewBox: `0 0 ${width} ${H}`, role: 'img', 'aria-label': o.title });
  const grid = svg('g', { class: 'grid' });
  for (const v of ticks) {
    grid.append(svg('line', { x1: ML, x2: ML + pw, y1: ys(v), y2: ys(v) }), svg('text', { x: ML - 6, y: ys(v) + 4, 'text-anchor': 'end' }, o.fmt(v)));
  }
  for (const t of timeTicks(o.startMs, o.endMs, Math.max(2, Math.floor(pw / 90)))) {
    grid.append(svg('text', { x: xs(t), y: H - 6, 'text-anchor': 'middle' }, fmtTime(t)));
  }
  root.append(grid);
  for (const s of o.series) {
    // a gap where a step has no value: a new subpath after a missing step
    let d = '';
    let prev = -Infinity;
    for (const [t, v] of s.points) {
      d += `${t - prev > o.stepMs * 1.5 ? 'M' : 'L'}${xs(t).toFixed(1)},${ys(v).toFixed(1)}`;
      prev = t;
    }
    root.append(
      svg('path', {
        class: 'series',
        d: d || 'M0,0',
        style: `stroke:${s.color}`,
        'data-testid': 'chart-series',
        'data-series': s.name,
        'data-points': s.points.map(([t, v]) => `${t}:${v}`).join(';'),
      }),
    );
    // single points (between gaps) stay visible
    for (let i = 0; i < s.points.length; i++) {
      const [t, v] = s.points[i];
      const lone = (i === 0 || t - s.points[i - 1][0] > o.stepMs * 1.5) && (i === s.points.length - 1 || s.points[i + 1][0] - t > o.stepMs * 1.5);
      if (lone) root.append(svg('circle', { class: 'lone', cx: xs(t), cy: ys(v), r: 2.5, style: `fill:${s.color}` }));
    }
  }
  const cross = svg('line', { class: 'crosshair', y1: MT, y2: MT + ph, x1: -10, x2: -10 });
  root.append(cross);
  for (const e of o.exemplars || []) {
    const dot = svg(
      'circle',
      {
        class: 'exemplar',
        cx: xs(e.t).toFixed(1),
        cy: ys(e.v).toFixed(1),
        r: 3.5,
        style: `stroke:${e.color}`,
        tabindex: 0,
        role: 'link',
        'data-testid': 'exemplar',
        'data-trace-id': e.traceId,
        'data-span-id': e.spanId || '',
      },
      svg('title', null, `Exemplar: ${o.fmt(e.v)} at ${fmtTime(e.t)}\nOpen trace ${e.traceId.slice(0, 16)}…`),
    );
    root.append(dot);
  }

  const tip = h('div', { class: 'chart-tip', hidden: true });
  const legend = h(
    'div',
    { class: 'chart-legend' },
    o.series.length > 1 ? o.series.map((s) => h('span', null, h('span', { class: 'swatch', style: `background:${s.color}` }), s.name)) : null,
  );
  const card = h(
    'div',
    { class: 'card line-chart-card', 'data-testid': o.testid, 'data-query': o.query || '', 'data-start-ms': o.startMs, 'data-end-ms': o.endMs, 'data-step-ms': o.stepMs },
    h('div', { class: 'chart-head' }, h('h3', { class: 'chart-title', title: o.query || '' }, o.title), legend),
    h('div', { class: 'chart-plot' }, root, tip),
  );
  if (!o.series.some((s) => s.points.length)) card.append(h('div', { class: 'chart-empty muted' }, 'No data in this range'));

  // crosshair: the step under the pointer and each series' value there
  const stepAt = (ev: MouseEvent) => {
    const r = root.getBoundingClientRect();
    const x = ((ev.clientX - r.left) / r.width) * width;
    if (x < ML || x > ML + pw) return null;
    const t = o.startMs + ((x - ML) / pw) * (o.endMs - o.startMs);
    return o.startMs + Math.floor((t - o.startMs) / o.stepMs) * o.stepMs;
  };
  root.addEventListener('mousemove', (ev) => {
    const t = stepAt(ev);
    if (t === null || (ev.target as Element).classList.contains('exemplar')) {
      tip.hidden = true;
      cross.setAttribute('x1', '-10');
      cross.setAttribute('x2', '-10');
      return;
    }
    const rows = o.series
      .map((s) => [s, s.points.find(([pt]) => Math.abs(pt - t) < o.stepMs / 2)] as const)
      .filter(([, p]) => p)
      .map(([s, p]) => h('div', null, h('span', { class: 'swatch', style: `background:${s.color}` }), `${s.name} `, h('b', null, o.fmt(p![1]))));
    const x = xs(t);
    cross.setAttribute('x1', String(x));
    cross.setAttribute('x2', String(x));
    tip.replaceChildren(h('div', { class: 'muted' }, fmtTime(t)), ...(rows.length ? rows : [h('div', { class: 'muted' }, 'no value')]));
    tip.hidden = false;
    tip.style.left = `${Math.min(x + 12, width - 160)}px`;
  });
  root.addEventListener('mouseleave', () => {
    tip.hidden = true;
    cross.setAttribute('x1', '-10');
    cross.setAttribute('x2', '-10');
  });
  const exemplarOf = (el: Element) => (o.exemplars || []).find((e) => e.traceId === el.getAttribute('data-trace-id') && (e.spanId || '') === el.getAttribute('data-span-id'));
  root.addEventListener('click', (ev) => {
    const ex = (ev.target as Element).closest('.exemplar');
    if (ex) {
      const e = exemplarOf(ex);
      if (e) o.onExemplar?.(e);
      return;
    }
    const t = stepAt(ev);
    if (t !== null) o.onPick?.(t);
  });
  root.addEventListener('keydown', (ev) => {
    const ex = (ev.target as Element).closest('.exemplar');
    if (ex && ev.key === 'Enter') {
      const e = exemplarOf(ex);
      if (e) o.onExemplar?.(e);
    }
  });
  if (o.onPick) root.classList.add('pickable');
  return card;
}

/** Small lines of `series` over [startMs, endMs], on one scale, for a table cell. */
export function sparkline(series: { points: [number, number][]; color: string }[], startMs: number, endMs: number): SVGSVGElement {
  const W = 96;
  const SH = 22;
  let top = 0;
  for (const s of series) for (const [, v] of s.points) top = Math.max(top, v);
  const line = (points: [number, number][]) =>
    points.map(([t, v], i) => `${i ? 'L' : 'M'}${(((t - startMs) / Math.max(1, endMs - startMs)) * W).toFixed(1)},${(SH - 2 - (top > 0 ? v / top : 0) * (SH - 4)).toFixed(1)}`).join('');
  return svg(
    'svg',
    { class: 'sparkline', width: W, height: SH, viewBox: `0 0 ${W} ${SH}`, 'aria-hidden': 'true' },
    series.map((s) => svg('path', { d: line(s.points) || 'M0,0', style: `stroke:${s.color}` })),
  );
}
