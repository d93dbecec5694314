// Trace page: header, virtualised waterfall, minimap, find, critical path, span detail panel.

import { ApiError, TraceResult } from '../api';
import { download, loadTrace, localTraces, toJaegerJson, toOtlpJson } from '../formats';
import { errorBox } from '../components';
import { copyText, h, mount, toast } from '../dom';
import { CriticalPath, Trace, buildTrace, criticalPath, relNs, searchText, selfTimes, visibleRows } from '../model';
import { Page, replaceUrl } from '../router';
import { fmtCount, fmtDuration, niceTicks, serviceColor } from '../util';
import { renderSpanPanel } from './span-panel';
import { fileGone, loadingSkeleton, notFound, traceBanners, traceHeader } from './trace-chrome';
import { SubView, ViewHost, flameView, statsView, traceGraphView } from './trace-views';

const ROW = 26; // px, fixed row height
const OVERSCAN = 12; // rows rendered above and below the viewport
const INDENT = 14; // px per tree level

export function tracePage(_url: URL, match: RegExpExecArray): Page {
  const traceId = decodeURIComponent(match[1]).toLowerCase();
  const abort = new AbortController();
  const el = h('div', { class: 'page trace-page' });
  let view: TraceView | null = null;

  document.title = `Trace ${traceId.slice(0, 16)} · weft`;
  mount(el, loadingSkeleton(traceId));

  const t0 = performance.now();
  const local = localTraces.get(traceId);
  const fromFile = new URL(location.href).searchParams.get('source') === 'file';
  const loading = fromFile && !local ? Promise.reject(new ApiError(0, 'file')) : loadTrace(traceId, abort.signal);
  loading
    .then((res) => {
      if (abort.signal.aborted) return;
      const tFetched = performance.now();
      const trace = buildTrace(traceId, res.data);
      if (!trace.spans.length) {
        mount(el, notFound(traceId, 'The trace exists but holds no spans.'));
        return;
      }
      view = new TraceView(el, trace, res, res.file);
      view.mount(new URL(location.href));
      const tDone = performance.now();
      view.loadedMarker.setAttribute('data-fetch-ms', String(Math.round(tFetched - t0)));
      view.loadedMarker.setAttribute('data-render-ms', String(Math.round(tDone - tFetched)));
    })
    .catch((e: unknown) => {
      if ((e as Error).name === 'AbortError') return;
      if (fromFile && !local) mount(el, fileGone(traceId));
      else if ((e as ApiError).status === 404) mount(el, notFound(traceId, (e as ApiError).message));
      else
        mount(
          el,
          h('div', { class: 'page-pad' }, errorBox(e, 'Could not load the trace'), h('p', null, h('a', { class: 'btn', href: '/search' }, '← Back to search'))),
        );
    });

  return {
    el,
    update(u: URL) {
      if (view) view.applyUrl(u);
      return true;
    },
    destroy() {
      abort.abort();
      view?.destroy();
    },
  };
}

class TraceView {
  t: Trace;
  collapsed: Uint8Array;
  rows: Int32Array; // visible span indices
  rowOf: Int32Array; // span index -> visible row, -1 if hidden
  selected = -1;
  cp: CriticalPath | null = null;
  cpOn = false;
  matchSet: Uint8Array | null = null;
  matches: number[] = [];
  matchPos = -1;
  texts: string[] | null = null;

  root: HTMLElement;
  scroller!: HTMLElement;
  canvasEl!: HTMLElement;
  headerEl!: HTMLElement;
  panel!: HTMLElement;
  minimap!: HTMLCanvasElement;
  minimapBox!: HTMLElement;
  minimapView!: HTMLElement;
  findInput!: HTMLInputElement;
  findCount!: HTMLElement;
  cpBtn!: HTMLButtonElement;
  loadedMarker!: HTMLElement;
  rendered = new Map<number, HTMLElement>();
  indentStep = INDENT;
  maxIndent = 220;
  raf = 0;
  resizeObs: ResizeObserver | null = null;
  truncated: boolean;
  truncMessage: string;
  res: TraceResult;
  /** the file the trace was opened from, or null when it came from weft */
  file: string | null;
  /** Whether weft holds each linked trace looked up so far, by trace ID. */
  linkedTraces = new Map<string, boolean>();
  /** the time window shown, ns since the trace start (the whole trace unless zoomed) */
  v0 = 0;
  v1 = 0;
  ruler!: HTMLElement;
  zoomSel!: HTMLElement;
  mmZoom!: HTMLElement;
  zoomBtn!: HTMLButtonElement;
  wfWrap!: HTMLElement;
  /** the timeline (toolbar, minimap, waterfall) and the pane the other views show in */
  tl!: HTMLElement;
  pane!: HTMLElement;
  view = 'timeline';
  tabs = new Map<string, HTMLElement>();
  subviews = new Map<string, SubView>();
  selfNs: Float64Array | null = null;
  closeMenu: ((ev: MouseEvent) => void) | null = null;
  minimapDrawnWidth = 0;

  constructor(root: HTMLElement, t: Trace, res: TraceResult, file: string | null) {
    this.root = root;
    this.t = t;
    this.res = res;
    this.file = file;
    this.truncated = res.truncated;
    this.truncMessage = res.message;
    this.v1 = t.durationNs;
    this.collapsed = new Uint8Array(t.spans.length);
    this.rows = visibleRows(t, this.collapsed);
    this.rowOf = new Int32Array(t.spans.length);
    this.indexRows();
  }

  indexRows() {
    this.rowOf.fill(-1);
    for (let r = 0; r < this.rows.length; r++) this.rowOf[this.rows[r]] = r;
  }

  mount(url: URL) {
    const rootSpan = this.t.spans[this.t.root];
    document.title = `${rootSpan.service}: ${rootSpan.name} · weft`;
    const header = traceHeader(this.t, this.truncated);
    const banners = traceBanners(this.t, this.truncated, this.truncMessage, this.file);
    const tabs = this.buildTabs();
    const toolbar = this.buildToolbar();
    this.buildMinimap();
    const { nameHead, wfWrap, body } = this.buildWaterfall();
    this.tl = h('div', { class: 'tl' }, toolbar, this.minimapBox, body);
    this.pane = h('div', { class: 'view-pane', hidden: true });
    mount(this.root, header, banners, tabs, this.tl, this.pane, this.loadedMarker);
    this.wireColumnResize(nameHead, wfWrap);
    this.wireEvents();
    this.wireZoom();

    const p = url.searchParams;
    this.measureIndent();
    this.setZoom(...this.zoomFromParam(p.get('zoom')), false);
    if (p.get('cp') === '1') this.toggleCp(false);
    this.selectFromUrl(p.get('span'), true);
    this.syncScrollbarPad();
    this.renderRuler();
    this.renderRows(true);
    this.drawMinimap();
    this.showView(p.get('view') || 'timeline', p);
  }

  /** Back, forward or a link changed the URL: show what it says. */
  applyUrl(url: URL) {
    const p = url.searchParams;
    const [a, b] = this.zoomFromParam(p.get('zoom'));
    if (a !== this.v0 || b !== this.v1) this.setZoom(a, b, false);
    if ((p.get('cp') === '1') !== this.cpOn) this.toggleCp(false);
    this.selectFromUrl(p.get('span'));
    this.showView(p.get('view') || 'timeline', p);
  }

  /** Changes the query of the URL: replaced in place, or a new history entry with `push`. */
  writeUrl(change: (p: URLSearchParams) => void, push = false) {
    const p = new URLSearchParams(location.search);
    change(p);
    const q = p.toString();
    const path = `/trace/${this.t.id}${q ? `?${q}` : ''}`;
    if (push) history.pushState(null, '', path);
    else replaceUrl(path);
  }

  // --- views ---------------------------------------------------------------------------------

  /** The view tabs, and the trace's actions: compare, download. */
  private buildTabs(): HTMLElement {
    const defs: [string, string, string][] = [
      ['timeline', 'Timeline', 'The spans on a time axis'],
      ['stats', 'Statistics', 'Count, duration and self time by service, operation or attribute'],
      ['flame', 'Flame graph', 'Spans merged by their service and operation path; width is time'],
      ['graph', 'Service graph', 'The services of this trace and the calls between them'],
    ];
    const bar = h('div', { class: 'view-tabs', role: 'tablist', 'aria-label': 'Trace views' });
    for (const [key, label, title] of defs) {
      const tab = h('button', { class: 'view-tab', type: 'button', role: 'tab', title, 'data-testid': `view-${key}`, 'aria-selected': 'false' }, label);
      tab.addEventListener('click', () => {
        if (this.view === key) return;
        this.writeUrl((p) => (key === 'timeline' ? p.delete('view') : p.set('view', key)), true);
        this.showView(key, new URLSearchParams(location.search));
      });
      this.tabs.set(key, tab);
      bar.appendChild(tab);
    }
    const item = (label: string, testid: string, run: () => void) => {
      const b = h('button', { class: 'menu-item', type: 'button', 'data-testid': testid }, label);
      b.addEventListener('click', () => {
        menu.open = false;
        run();
      });
      return b;
    };
    const id = this.t.id;
    const menu = h(
      'details',
      { class: 'menu' },
      h('summary', { class: 'btn', 'data-testid': 'download', title: 'Download this trace as a JSON file' }, 'Download ▾'),
      h(
        'div',
        { class: 'menu-list' },
        item('OTLP JSON', 'download-otlp', () => download(`trace-${id}.otlp.json`, toOtlpJson(this.res.data))),
        item('Jaeger JSON', 'download-jaeger', () => download(`trace-${id}.jaeger.json`, toJaegerJson(this.t))),
      ),
    );
    this.closeMenu = (ev: MouseEvent) => {
      if (menu.open && !menu.contains(ev.target as Node)) menu.open = false;
    };
    document.addEventListener('click', this.closeMenu);
    return h(
      'div',
      { class: 'view-bar' },
      bar,
      h('span', { class: 'spacer' }),
      h('a', { class: 'btn', href: `/compare?a=${id}`, 'data-testid': 'compare-link', title: 'Compare the structure of this trace with another' }, 'Compare…'),
      menu,
    );
  }

  /** What the views share: the trace, self times (computed once) and the URL. */
  private host(): ViewHost {
    return {
      t: this.t,
      selfNs: () => (this.selfNs ||= selfTimes(this.t)),
      setParams: (change, push = false) => this.writeUrl(change, push),
    };
  }

  showView(key: string, p: URLSearchParams) {
    if (!this.tabs.has(key)) key = 'timeline';
    const was = this.view;
    this.view = key;
    for (const [k, tab] of this.tabs) {
      tab.setAttribute('aria-selected', String(k === key));
      tab.classList.toggle('active', k === key);
    }
    this.tl.hidden = key !== 'timeline';
    this.pane.hidden = key === 'timeline';
    this.root.classList.toggle('in-view', key !== 'timeline');
    if (key === 'timeline') {
      // the rows and the minimap were kept while hidden; the resize observer redraws what a
      // new width changes
      if (was !== 'timeline') {
        this.syncScrollbarPad();
        this.renderRuler();
      }
      return;
    }
    let v = this.subviews.get(key);
    if (!v) {
      const make = key === 'stats' ? statsView : key === 'flame' ? flameView : traceGraphView;
      v = make(this.host());
      this.subviews.set(key, v);
    }
    if (this.pane.firstChild !== v.el) mount(this.pane, v.el);
    v.update(p);
  }

  /** The toolbar: find in trace, critical path, expand and collapse. */
  private buildToolbar(): HTMLElement {
    const t = this.t;
    this.findInput = h('input', { class: 'input find', type: 'search', placeholder: 'Find in trace (name, service, attribute)…', 'aria-label': 'Find in trace', 'data-testid': 'find' });
    this.findCount = h('span', { class: 'find-count muted', 'data-testid': 'find-count' });
    const prevBtn = h('button', { class: 'btn icon', type: 'button', title: 'Previous match (Shift+Enter)', 'aria-label': 'Previous match' }, '↑');
    const nextBtn = h('button', { class: 'btn icon', type: 'button', title: 'Next match (Enter)', 'aria-label': 'Next match' }, '↓');
    this.cpBtn = h('button', { class: 'btn toggle', type: 'button', 'aria-pressed': 'false', 'data-testid': 'critical-path', title: 'Highlight the critical path: the chain of spans that determined the trace duration' }, 'Critical path');
    this.zoomBtn = h('button', { class: 'btn', type: 'button', 'data-testid': 'zoom-reset', title: 'Show the whole trace again (or double-click the ruler)', hidden: true }, 'Reset zoom');
    this.zoomBtn.addEventListener('click', () => this.setZoom(0, this.t.durationNs));
    const expandBtn = h('button', { class: 'btn', type: 'button' }, 'Expand all');
    const collapseBtn = h('button', { class: 'btn', type: 'button', title: 'Show only the top two levels' }, 'Collapse');
    const toolbar = h(
      'div',
      { class: 'trace-toolbar' },
      h('div', { class: 'find-box' }, this.findInput, this.findCount, prevBtn, nextBtn),
      h('span', { class: 'spacer' }),
      this.zoomBtn,
      this.cpBtn,
      expandBtn,
      collapseBtn,
    );
    let findTimer = 0;
    this.findInput.addEventListener('input', () => {
      clearTimeout(findTimer);
      findTimer = window.setTimeout(() => this.find(this.findInput.value), t.spans.length > 20000 ? 200 : 60);
    });
    this.findInput.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter') {
        ev.preventDefault();
        clearTimeout(findTimer);
        if (this.findInput.value.trim().toLowerCase() !== this.lastFind) this.find(this.findInput.value);
        else this.step(ev.shiftKey ? -1 : 1);
      } else if (ev.key === 'Escape') {
        this.findInput.value = '';
        this.find('');
      }
    });
    prevBtn.addEventListener('click', () => this.step(-1));
    nextBtn.addEventListener('click', () => this.step(1));
    this.cpBtn.addEventListener('click', () => this.toggleCp(true));
    expandBtn.addEventListener('click', () => {
      this.collapsed.fill(0);
      this.relayout();
    });
    collapseBtn.addEventListener('click', () => {
      const sp = this.t.spans;
      for (let i = 0; i < sp.length; i++) this.collapsed[i] = sp[i].children && sp[i].depth >= 1 ? 1 : 0;
      this.relayout();
    });
    return toolbar;
  }

  /** The minimap: an overview of the waterfall to click or drag in. */
  private buildMinimap() {
    this.minimap = h('canvas', { class: 'minimap-canvas', height: 56 });
    this.minimapView = h('div', { class: 'minimap-view' });
    this.mmZoom = h('div', { class: 'mm-zoom', hidden: true });
    const sel = h('div', { class: 'zoom-sel', hidden: true });
    this.minimapBox = h('div', { class: 'minimap', title: 'Overview: click or drag up and down to jump; drag sideways to zoom into a time range', 'data-testid': 'minimap' }, this.minimap, this.mmZoom, this.minimapView, sel);
    this.minimapBox.addEventListener('mousedown', (ev) => this.minimapJump(ev));
  }

  /** The waterfall: ruler, rows and the span panel beside them. */
  private buildWaterfall(): { nameHead: HTMLElement; wfWrap: HTMLElement; body: HTMLElement } {
    const t = this.t;
    const nameHead = h('div', { class: 'wf-name-head' }, h('span', null, 'Service · operation'), h('span', { class: 'resize', title: 'Drag to resize' }));
    this.headerEl = h(
      'div',
      { class: 'wf-header' },
      nameHead,
      (this.ruler = h('div', { class: 'wf-ruler', 'data-testid': 'ruler', title: 'Drag to zoom into a time range; double-click to show the whole trace' })),
    );
    this.zoomSel = h('div', { class: 'zoom-sel', hidden: true });
    this.canvasEl = h('div', { class: 'wf-rows', style: `height:${this.rows.length * ROW}px` });
    this.scroller = h('div', { class: 'waterfall', 'data-testid': 'waterfall', tabindex: 0, 'aria-label': 'Span waterfall' }, this.canvasEl);
    this.panel = h('aside', { class: 'span-panel', 'data-testid': 'span-panel', hidden: true });
    this.loadedMarker = h('span', { 'data-testid': 'trace-loaded', 'data-span-count': t.spans.length, hidden: true });

    const wfWrap = h('div', { class: 'wf-wrap card' }, this.headerEl, this.scroller, this.zoomSel);
    this.wfWrap = wfWrap;
    const body = h('div', { class: 'trace-body' }, wfWrap, this.panel);
    return { nameHead, wfWrap, body };
  }

  /** Dragging the name column's edge resizes it. */
  private wireColumnResize(nameHead: HTMLElement, wfWrap: HTMLElement) {
    const resize = nameHead.querySelector('.resize') as HTMLElement;
    resize.addEventListener('mousedown', (ev) => {
      ev.preventDefault();
      const startX = ev.clientX;
      const startW = nameHead.getBoundingClientRect().width;
      const move = (e: MouseEvent) => {
        const w = Math.max(160, Math.min(startW + e.clientX - startX, wfWrap.clientWidth - 200));
        this.root.style.setProperty('--name-w', `${w}px`);
        if (this.measureIndent()) this.schedule(true);
      };
      const up = () => {
        window.removeEventListener('mousemove', move);
        window.removeEventListener('mouseup', up);
      };
      window.addEventListener('mousemove', move);
      window.addEventListener('mouseup', up);
    });
  }

  /** Scrolling, clicks and keys in the waterfall and the panel; a resize redraws. */
  private wireEvents() {
    this.scroller.addEventListener('scroll', () => this.schedule(), { passive: true });
    this.scroller.addEventListener('click', (ev) => this.onClick(ev));
    this.scroller.addEventListener('keydown', (ev) => this.onKey(ev));
    this.panel.addEventListener('click', (ev) => this.onPanelClick(ev));
    if (typeof ResizeObserver !== 'undefined') {
      this.resizeObs = new ResizeObserver(() => {
        if (!this.scroller.clientWidth) return; // hidden behind another view
        this.syncScrollbarPad();
        this.measureIndent();
        this.renderRuler();
        // the minimap keeps its drawing while the timeline is hidden: redraw on a new width only
        if ((this.minimapBox.clientWidth || 1000) !== this.minimapDrawnWidth) this.drawMinimap();
        this.schedule(true);
      });
      this.resizeObs.observe(this.scroller);
    }
  }

  destroy() {
    if (this.closeMenu) document.removeEventListener('click', this.closeMenu);
    cancelAnimationFrame(this.raf);
    this.resizeObs?.disconnect();
  }

  /** Indentation shrinks for deep traces so names stay readable; call when the column resizes. */
  measureIndent(): boolean {
    const nameW = (this.headerEl.firstElementChild as HTMLElement | null)?.offsetWidth || 380;
    const maxIndent = Math.max(60, nameW - 170);
    const step = Math.max(4, Math.min(INDENT, maxIndent / Math.max(1, this.t.maxDepth)));
    const changed = maxIndent !== this.maxIndent || step !== this.indentStep;
    this.maxIndent = maxIndent;
    this.indentStep = step;
    return changed;
  }

  syncScrollbarPad() {
    const sb = this.scroller.offsetWidth - this.scroller.clientWidth;
    this.headerEl.style.paddingRight = `${sb}px`;
  }

  // --- virtualised rows ------------------------------------------------------------------

  schedule(full = false) {
    if (full) this.dirty = true;
    if (this.raf) return;
    this.raf = requestAnimationFrame(() => {
      this.raf = 0;
      const t0 = performance.now();
      this.renderRows(this.dirty);
      this.dirty = false;
      this.updateMinimapView();
      // the script time of this frame's update, read by the tests (no selector names the
      // attribute, so writing it invalidates no style)
      this.scroller.setAttribute('data-frame-ms', String(Math.round((performance.now() - t0) * 100) / 100));
    });
  }
  dirty = false;

  /** Re-render every row in view (state changed); otherwise only add/remove at the edges. */
  renderRows(full = false) {
    const top = this.scroller.scrollTop;
    const height = this.scroller.clientHeight || 600;
    const n = this.rows.length;
    const first = Math.max(0, Math.floor(top / ROW) - OVERSCAN);
    const last = Math.min(n - 1, Math.ceil((top + height) / ROW) + OVERSCAN);
    if (full) {
      for (const e of this.rendered.values()) e.remove();
      this.rendered.clear();
    } else {
      for (const [r, e] of this.rendered) {
        if (r < first || r > last) {
          e.remove();
          this.rendered.delete(r);
        }
      }
    }
    const frag = document.createDocumentFragment();
    for (let r = first; r <= last; r++) {
      if (this.rendered.has(r)) continue;
      const e = this.makeRow(r);
      this.rendered.set(r, e);
      frag.appendChild(e);
    }
    this.canvasEl.appendChild(frag);
  }

  makeRow(r: number): HTMLElement {
    const t = this.t;
    const i = this.rows[r];
    const sp = t.spans[i];
    const v0 = this.v0;
    const vd = this.v1 - this.v0 || 1;
    const color = serviceColor(sp.service);
    const hasKids = !!sp.children && sp.children.length > 0;
    const collapsed = this.collapsed[i] === 1;
    const indentPx = Math.min(sp.depth * this.indentStep, this.maxIndent);
    const clipped = sp.depth * this.indentStep > this.maxIndent;

    let cls = 'row';
    if (i === this.selected) cls += ' selected';
    if (sp.error) cls += ' error';
    if (this.matchSet) cls += this.matchSet[i] ? ' match' : ' nomatch';
    if (this.matchPos >= 0 && this.matches[this.matchPos] === i) cls += ' match-current';
    if (this.cpOn && this.cp) cls += this.cp.mark[i] ? ' cp' : ' cp-off';

    // the bar clipped to the time window shown
    const end = sp.start + sp.dur;
    const before = end < v0;
    const after = sp.start > this.v1;
    const left = before ? 0 : after ? 100 : (Math.max(sp.start, v0) - v0) / vd * 100;
    const width = before || after ? 0 : (Math.min(end, this.v1) - Math.max(sp.start, v0)) / vd * 100;
    // duration label: right of the bar, else left of it, else inside it
    const durPos = after ? ' left' : left + width <= 78 ? '' : left >= 12 ? ' left' : ' inside';

    const name = h(
      'div',
      { class: 'r-name', style: `padding-left:${6 + indentPx}px` },
      hasKids
        ? h('button', { class: `tog${collapsed ? ' closed' : ''}`, type: 'button', 'data-act': 'toggle', 'aria-label': collapsed ? 'Expand' : 'Collapse', 'aria-expanded': String(!collapsed), tabindex: -1 }, collapsed ? `▸` : '▾')
        : h('span', { class: 'tog-space' }),
      sp.error ? h('span', { class: 'err-icon', title: `Error${sp.statusMessage ? `: ${sp.statusMessage}` : ''}` }, '!') : null,
      h('span', { class: 'svc', style: `--c:${color}` }, sp.service),
      h('span', { class: 'op' }, sp.name),
      collapsed ? h('span', { class: 'hidden-count', title: 'Hidden descendants' }, `+${fmtCount(t.size[i] - 1)}`) : null,
      clipped ? h('span', { class: 'depth-badge', title: `Depth ${sp.depth}: deeper than the column shows` }, `d${sp.depth}`) : null,
    );

    const clip = `${sp.start < v0 ? ' clip-l' : ''}${end > this.v1 ? ' clip-r' : ''}`;
    const barCell = h('div', { class: 'r-bar' }, before || after ? null : h('div', { class: `bar${clip}`, style: `left:${left}%;width:${width}%;--c:${color}` }));
    const ev = sp.events;
    if (ev.length && !before && !after) {
      const max = Math.min(ev.length, 50);
      for (let k = 0; k < max; k++) {
        const et = relNs(t, ev[k].timeUnixNano);
        if (et < v0 || et > this.v1) continue;
        barCell.appendChild(h('span', { class: `ev${/exception|error/i.test(ev[k].name || '') ? ' ev-err' : ''}`, style: `left:${((et - v0) / vd) * 100}%`, title: `${ev[k].name || 'event'} @ ${fmtDuration(et - sp.start)}` }));
      }
    }
    const segs = this.cpOn && this.cp ? this.cp.bySpan.get(i) : undefined;
    if (segs) {
      for (const k of segs) {
        const g = this.cp!.segs[k];
        if (g.end < v0 || g.start > this.v1) continue;
        const a = Math.max(g.start, v0);
        const b = Math.min(g.end, this.v1);
        barCell.appendChild(
          h('span', {
            class: 'cp-seg',
            'data-testid': 'cp-seg',
            'data-start-ns': g.start,
            'data-end-ns': g.end,
            title: `On the critical path: ${fmtDuration(g.end - g.start)} (+${fmtDuration(g.start)} to +${fmtDuration(g.end)})`,
            style: `left:${((a - v0) / vd) * 100}%;width:${((b - a) / vd) * 100}%`,
          }),
        );
      }
    }
    barCell.appendChild(
      h(
        'span',
        {
          class: `dur${durPos}`,
          'data-testid': 'span-duration',
          'data-ns': sp.dur,
          style: durPos === '' ? `left:${left + width}%` : durPos === ' left' ? `right:${100 - left}%` : `right:${Math.max(0, 100 - left - width)}%`,
        },
        before ? `◂ ${fmtDuration(sp.dur)}` : after ? `${fmtDuration(sp.dur)} ▸` : fmtDuration(sp.dur),
      ),
    );

    return h(
      'div',
      {
        class: cls,
        'data-testid': 'span-row',
        'data-span-id': sp.id,
        // the parent row's ID; empty for rows shown at the top level (orphans keep theirs in
        // data-missing-parent)
        'data-parent-id': sp.parent >= 0 ? t.spans[sp.parent].id : '',
        'data-missing-parent': sp.orphan && sp.parentId ? sp.parentId : null,
        'data-depth': sp.depth,
        'data-idx': i,
        style: `top:${r * ROW}px`,
        role: 'row',
        'aria-selected': i === this.selected ? 'true' : 'false',
      },
      name,
      barCell,
    );
  }

  /** Collapse state changed: recompute visible rows, keep the first visible span in place. */
  relayout(keep?: number) {
    const topRow = Math.floor(this.scroller.scrollTop / ROW);
    const anchor = keep ?? this.rows[Math.min(topRow, this.rows.length - 1)];
    this.rows = visibleRows(this.t, this.collapsed);
    this.indexRows();
    this.canvasEl.style.height = `${this.rows.length * ROW}px`;
    if (anchor !== undefined && keep === undefined) {
      const r = this.rowOf[anchor];
      if (r >= 0) this.scroller.scrollTop = r * ROW;
    }
    this.renderRows(true);
    this.drawMinimap();
  }

  toggle(i: number) {
    this.collapsed[i] = this.collapsed[i] ? 0 : 1;
    const r = this.rowOf[i];
    const offset = r * ROW - this.scroller.scrollTop;
    this.rows = visibleRows(this.t, this.collapsed);
    this.indexRows();
    this.canvasEl.style.height = `${this.rows.length * ROW}px`;
    // keep the toggled row where it was on screen
    this.scroller.scrollTop = this.rowOf[i] * ROW - offset;
    this.renderRows(true);
    this.drawMinimap();
  }

  /** Expand every collapsed ancestor of span i. */
  reveal(i: number): boolean {
    let changed = false;
    for (let p = this.t.spans[i].parent; p >= 0; p = this.t.spans[p].parent) {
      if (this.collapsed[p]) {
        this.collapsed[p] = 0;
        changed = true;
      }
    }
    if (changed) {
      this.rows = visibleRows(this.t, this.collapsed);
      this.indexRows();
      this.canvasEl.style.height = `${this.rows.length * ROW}px`;
      this.drawMinimap();
    }
    return changed;
  }

  scrollToSpan(i: number, center = true) {
    const r = this.rowOf[i];
    if (r < 0) return;
    const h = this.scroller.clientHeight || 600;
    const y = r * ROW;
    if (center) this.scroller.scrollTop = Math.max(0, y - h / 2 + ROW / 2);
    else if (y < this.scroller.scrollTop) this.scroller.scrollTop = y;
    else if (y + ROW > this.scroller.scrollTop + h) this.scroller.scrollTop = y + ROW - h;
  }

  // --- events ------------------------------------------------------------------------------

  onClick(ev: MouseEvent) {
    const target = ev.target as Element;
    const row = target.closest('.row') as HTMLElement | null;
    if (!row) return;
    const i = Number(row.getAttribute('data-idx'));
    if (target.closest('[data-act="toggle"]')) {
      this.toggle(i);
      return;
    }
    this.select(this.selected === i ? -1 : i);
  }

  onKey(ev: KeyboardEvent) {
    if ((ev.target as Element).closest('input, textarea, select')) return;
    // + and - zoom around the middle of the window, 0 shows the whole trace (as on the graph page)
    if ((ev.key === '+' || ev.key === '=' || ev.key === '-' || ev.key === '0') && !ev.ctrlKey && !ev.metaKey) {
      ev.preventDefault();
      if (ev.key === '0') this.setZoom(0, this.t.durationNs);
      else this.zoomBy(ev.key === '-' ? 2 : 0.5, 0.5, true);
      return;
    }
    const cur = this.selected >= 0 ? this.rowOf[this.selected] : -1;
    let next = -2;
    if (ev.key === 'ArrowDown' || ev.key === 'j') next = Math.min(this.rows.length - 1, cur + 1);
    else if (ev.key === 'ArrowUp' || ev.key === 'k') next = Math.max(0, cur - 1);
    else if ((ev.key === 'ArrowLeft' || ev.key === 'ArrowRight') && this.selected >= 0) {
      const sp = this.t.spans[this.selected];
      const want = ev.key === 'ArrowLeft' ? 1 : 0;
      if (sp.children && this.collapsed[this.selected] !== want) this.toggle(this.selected);
      else if (ev.key === 'ArrowLeft' && sp.parent >= 0) this.select(sp.parent, true);
      ev.preventDefault();
      return;
    } else if (ev.key === 'Escape') {
      this.select(-1);
      return;
    }
    if (next >= -1 && next !== -2) {
      ev.preventDefault();
      if (next >= 0) {
        this.select(this.rows[next], false);
        this.scrollToSpan(this.rows[next], false);
      }
    }
  }

  select(i: number, scroll = false) {
    this.selected = i;
    this.writeUrl((p) => (i >= 0 ? p.set('span', this.t.spans[i].id) : p.delete('span')));
    if (i >= 0 && this.reveal(i)) scroll = true;
    if (i >= 0 && scroll) this.scrollToSpan(i);
    this.renderPanel();
    this.renderRows(true);
  }

  selectFromUrl(spanId: string | null, initial = false) {
    if (!spanId) {
      if (this.selected >= 0) {
        this.selected = -1;
        this.renderPanel();
        this.renderRows(true);
      }
      return;
    }
    const i = this.t.byId.get(spanId.toLowerCase());
    if (i !== undefined && i === this.selected && !initial) return;
    if (i === undefined) {
      toast(`Span ${spanId} is not in this trace`);
      return;
    }
    if (initial) {
      this.selected = i;
      this.reveal(i);
      this.renderPanel();
      // layout is ready after mount; scroll after the panel took its width
      this.scrollToSpan(i);
      requestAnimationFrame(() => {
        this.scrollToSpan(i);
        this.renderRows(true);
        this.updateMinimapView();
      });
    } else this.select(i, true);
  }

  // --- critical path -----------------------------------------------------------------------

  toggleCp(writeUrl: boolean) {
    this.cpOn = !this.cpOn;
    if (this.cpOn && !this.cp) this.cp = criticalPath(this.t);
    if (writeUrl) this.writeUrl((p) => (this.cpOn ? p.set('cp', '1') : p.delete('cp')));
    this.cpBtn.setAttribute('aria-pressed', String(this.cpOn));
    this.cpBtn.classList.toggle('on', this.cpOn);
    this.root.classList.toggle('cp-mode', this.cpOn);
    this.renderRows(true);
    this.drawMinimap();
  }

  // --- find --------------------------------------------------------------------------------

  lastFind = '';
  find(q: string) {
    const needle = q.trim().toLowerCase();
    this.lastFind = needle;
    if (!needle) {
      this.matchSet = null;
      this.matches = [];
      this.matchPos = -1;
      this.findCount.textContent = '';
      this.renderRows(true);
      this.drawMinimap();
      return;
    }
    const t = this.t;
    const n = t.spans.length;
    if (!this.texts) {
      this.texts = new Array<string>(n);
      for (let i = 0; i < n; i++) this.texts[i] = searchText(t, i);
    }
    const set = new Uint8Array(n);
    const list: number[] = [];
    // in display order
    for (let k = 0; k < n; k++) {
      const i = t.order[k];
      if (this.texts[i].includes(needle)) {
        set[i] = 1;
        list.push(i);
      }
    }
    this.matchSet = set;
    this.matches = list;
    this.matchPos = -1;
    this.findInput.classList.toggle('invalid', list.length === 0);
    if (list.length) this.step(1);
    else {
      this.findCount.textContent = 'no matches';
      this.renderRows(true);
      this.drawMinimap();
    }
  }

  step(dir: number) {
    if (!this.matches.length) return;
    this.matchPos = (this.matchPos + dir + this.matches.length) % this.matches.length;
    const i = this.matches[this.matchPos];
    this.findCount.textContent = `${fmtCount(this.matchPos + 1)} / ${fmtCount(this.matches.length)}`;
    this.reveal(i);
    this.scrollToSpan(i);
    this.renderRows(true);
    this.drawMinimap();
  }

  // --- minimap -----------------------------------------------------------------------------

  drawMinimap() {
    const n = this.rows.length;
    const show = n > 40;
    this.minimapBox.hidden = !show;
    if (!show) return;
    const cv = this.minimap;
    const w = this.minimapBox.clientWidth || 1000;
    this.minimapDrawnWidth = w;
    const dpr = window.devicePixelRatio || 1;
    const H = 56;
    cv.width = Math.round(w * dpr);
    cv.height = Math.round(H * dpr);
    cv.style.width = `${w}px`;
    cv.style.height = `${H}px`;
    const ctx = cv.getContext('2d');
    if (!ctx) return;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, H);
    const t = this.t;
    const total = t.durationNs || 1;
    const rh = Math.max(H / n, 0.5);
    let last = '';
    const dimOthers = !!this.matchSet || (this.cpOn && !!this.cp);
    for (let r = 0; r < n; r++) {
      const i = this.rows[r];
      const sp = t.spans[i];
      const hl = (this.matchSet && this.matchSet[i]) || (this.cpOn && this.cp && this.cp.mark[i]);
      const c = sp.error ? '#e15759' : serviceColor(sp.service);
      const key = c + (dimOthers && !hl ? 'd' : '');
      if (key !== last) {
        ctx.fillStyle = c;
        ctx.globalAlpha = dimOthers && !hl ? 0.18 : 0.9;
        last = key;
      }
      ctx.fillRect((sp.start / total) * w, (r / n) * H, Math.max(1, (sp.dur / total) * w), rh);
    }
    ctx.globalAlpha = 1;
    this.updateMinimapView();
    this.updateMinimapZoom();
  }

  updateMinimapView() {
    if (this.minimapBox.hidden) return;
    const total = this.rows.length * ROW || 1;
    const H = 56;
    const top = (this.scroller.scrollTop / total) * H;
    const hgt = Math.max(3, (this.scroller.clientHeight / total) * H);
    this.minimapView.style.top = `${top}px`;
    this.minimapView.style.height = `${Math.min(H, hgt)}px`;
  }

  /** A click or a drag up and down jumps to the rows there; a drag sideways selects a time range
   * of the whole trace to zoom into. */
  minimapJump(ev: MouseEvent) {
    if (ev.button !== 0) return;
    ev.preventDefault();
    const rect = this.minimapBox.getBoundingClientRect();
    const x0 = ev.clientX;
    const sel = this.minimapBox.querySelector('.zoom-sel') as HTMLElement;
    let zooming = false;
    const go = (e: MouseEvent) => {
      if (!zooming && Math.abs(e.clientX - x0) > 6) zooming = true;
      if (zooming) {
        const a = Math.max(rect.left, Math.min(x0, e.clientX));
        const b = Math.min(rect.right, Math.max(x0, e.clientX));
        sel.hidden = false;
        sel.style.left = `${a - rect.left}px`;
        sel.style.width = `${b - a}px`;
        return;
      }
      const f = Math.max(0, Math.min(1, (e.clientY - rect.top) / rect.height));
      this.scroller.scrollTop = f * this.rows.length * ROW - this.scroller.clientHeight / 2;
    };
    go(ev);
    const up = (e: MouseEvent) => {
      window.removeEventListener('mousemove', go);
      window.removeEventListener('mouseup', up);
      sel.hidden = true;
      if (!zooming) return;
      const T = this.t.durationNs;
      const f = (x: number) => Math.max(0, Math.min(1, (x - rect.left) / rect.width));
      this.setZoom(f(Math.min(x0, e.clientX)) * T, f(Math.max(x0, e.clientX)) * T);
    };
    window.addEventListener('mousemove', go);
    window.addEventListener('mouseup', up);
  }

  /** The zoomed window on the minimap (which always shows the whole trace). */
  updateMinimapZoom() {
    const T = this.t.durationNs || 1;
    const full = this.v0 <= 0 && this.v1 >= this.t.durationNs;
    this.mmZoom.hidden = full;
    if (full) return;
    this.mmZoom.style.left = `${(this.v0 / T) * 100}%`;
    this.mmZoom.style.width = `${((this.v1 - this.v0) / T) * 100}%`;
  }

  // --- time zoom ---------------------------------------------------------------------------

  /** `zoom=<from>-<to>` in ms since the trace start, else the whole trace. */
  zoomFromParam(z: string | null): [number, number] {
    const m = z ? /^(\d+(?:\.\d+)?)-(\d+(?:\.\d+)?)$/.exec(z) : null;
    if (!m) return [0, this.t.durationNs];
    return [Math.round(Number(m[1]) * 1e6), Math.round(Number(m[2]) * 1e6)];
  }

  /** Shows the time window [a, b] (ns since the trace start) in the waterfall. */
  setZoom(a: number, b: number, writeUrl = true, push = true) {
    const T = this.t.durationNs;
    // whole nanoseconds, as the URL keeps them
    a = Math.round(Math.max(0, Math.min(a, T)));
    b = Math.round(Math.max(a, Math.min(b, T)));
    // never narrower than a microsecond (or the whole trace, if shorter)
    const minW = Math.min(T, 1e3);
    if (b - a < minW) {
      const mid = (a + b) / 2;
      a = Math.max(0, Math.min(T - minW, mid - minW / 2));
      b = a + minW;
    }
    const full = a <= 0 && b >= T;
    this.v0 = full ? 0 : a;
    this.v1 = full ? T : b;
    const ms = (x: number) => String(Math.round(x) / 1e6);
    if (writeUrl) this.writeUrl((p) => (full ? p.delete('zoom') : p.set('zoom', `${ms(this.v0)}-${ms(this.v1)}`)), push);
    this.zoomBtn.hidden = full;
    this.scroller.setAttribute('data-view-start-ns', String(this.v0));
    this.scroller.setAttribute('data-view-end-ns', String(this.v1));
    if (!this.ruler.isConnected) return;
    const t0 = performance.now();
    if (writeUrl) this.scrollIntoWindow();
    this.renderRuler();
    this.renderRows(true);
    this.updateMinimapZoom();
    this.scroller.setAttribute('data-zoom-ms', String(Math.round((performance.now() - t0) * 10) / 10));
  }

  /** When no row on screen has a span in the time window, scrolls to the first row that has. */
  scrollIntoWindow() {
    const spans = this.t.spans;
    const inWindow = (r: number) => {
      const sp = spans[this.rows[r]];
      return sp.start <= this.v1 && sp.start + sp.dur >= this.v0;
    };
    const first = Math.floor(this.scroller.scrollTop / ROW);
    const last = Math.min(this.rows.length - 1, first + Math.ceil((this.scroller.clientHeight || 600) / ROW));
    for (let r = first; r <= last; r++) if (inWindow(r)) return;
    for (let r = 0; r < this.rows.length; r++) {
      if (inWindow(r)) {
        this.scroller.scrollTop = Math.max(0, r * ROW - ROW);
        return;
      }
    }
  }

  /** Dragging across the ruler zooms into that range; a double-click shows the whole trace. */
  /** Scales the window by `factor` around the point at fraction `at` of it. */
  zoomBy(factor: number, at: number, push: boolean) {
    const w = this.v1 - this.v0;
    const c = this.v0 + at * w;
    const nw = Math.min(this.t.durationNs, w * factor);
    let a = c - at * nw;
    a = Math.max(0, Math.min(a, this.t.durationNs - nw));
    this.setZoom(a, a + nw, true, push);
  }

  private wireZoom() {
    this.ruler.addEventListener('dblclick', () => this.setZoom(0, this.t.durationNs));
    // Ctrl/⌘ + wheel over the ruler or the bars zooms around the pointer; Shift + wheel pans a
    // zoomed window. The URL follows without a history entry per wheel step.
    const onWheel = (ev: WheelEvent) => {
      const bars = (ev.target as Element).closest('.r-bar, .wf-ruler');
      if (!bars || !(ev.ctrlKey || ev.metaKey || ev.shiftKey)) return;
      const rect = this.ruler.getBoundingClientRect();
      const at = Math.max(0, Math.min(1, (ev.clientX - rect.left) / rect.width));
      const delta = ev.deltaY || ev.deltaX;
      if (!delta) return;
      ev.preventDefault();
      if (ev.shiftKey && !ev.ctrlKey && !ev.metaKey) {
        const w = this.v1 - this.v0;
        if (w >= this.t.durationNs) return;
        const a = Math.max(0, Math.min(this.t.durationNs - w, this.v0 + (Math.sign(delta) * w) / 10));
        this.setZoom(a, a + w, true, false);
      } else this.zoomBy(delta > 0 ? 1.25 : 0.8, at, false);
    };
    this.headerEl.addEventListener('wheel', onWheel, { passive: false });
    this.scroller.addEventListener('wheel', onWheel, { passive: false });
    this.ruler.addEventListener('mousedown', (ev) => {
      if (ev.button !== 0) return;
      ev.preventDefault();
      const rect = this.ruler.getBoundingClientRect();
      const wrap = this.wfWrap.getBoundingClientRect();
      const clampX = (x: number) => Math.max(rect.left, Math.min(rect.right, x));
      const x0 = clampX(ev.clientX);
      const move = (e: MouseEvent) => {
        const x = clampX(e.clientX);
        this.zoomSel.hidden = Math.abs(x - x0) < 3;
        this.zoomSel.style.left = `${Math.min(x, x0) - wrap.left}px`;
        this.zoomSel.style.width = `${Math.abs(x - x0)}px`;
      };
      const up = (e: MouseEvent) => {
        window.removeEventListener('mousemove', move);
        window.removeEventListener('mouseup', up);
        this.zoomSel.hidden = true;
        const x = clampX(e.clientX);
        if (Math.abs(x - x0) < 3) return;
        const vd = this.v1 - this.v0;
        const at = (px: number) => this.v0 + ((px - rect.left) / rect.width) * vd;
        this.setZoom(at(Math.min(x, x0)), at(Math.max(x, x0)));
      };
      window.addEventListener('mousemove', move);
      window.addEventListener('mouseup', up);
    });
  }

  /** Ticks at round durations, as many as fit the ruler's width; a label that would run into the
   * previous one is left out (the tick line stays). The rows' grid lines follow the ticks. */
  renderRuler() {
    const W = this.ruler.clientWidth;
    if (!W) return;
    const v0 = this.v0;
    const vd = this.v1 - v0 || 1;
    const ticks = niceTicks(v0, this.v1, Math.max(2, Math.floor(W / 70))).filter((v) => v >= v0 - vd * 1e-9 && v <= this.v1 + vd * 1e-9);
    const els = ticks.map((v) =>
      h('span', { class: 'tick', style: `left:${((v - v0) / vd) * 100}%`, 'data-ns': Math.round(v) }, h('span', { class: 'tick-label', 'data-testid': 'ruler-label' }, v === 0 ? '0' : fmtDuration(v))),
    );
    mount(this.ruler, els);
    // the ruler's right margin (56 px) leaves room for the last label
    let prevRight = -Infinity;
    for (const e of els) {
      const label = e.firstElementChild as HTMLElement;
      const l = e.offsetLeft;
      const r = l + e.offsetWidth;
      if (l < prevRight + 8 || r > W + 54) label.remove();
      else prevRight = r;
    }
    if (ticks.length > 1) {
      const step = ticks[1] - ticks[0];
      this.canvasEl.style.setProperty('--grid-w', `${(step / vd) * W}px`);
      this.canvasEl.style.setProperty('--grid-x', `${((ticks[0] - v0) / vd) * W}px`);
    }
  }

  // --- detail panel ------------------------------------------------------------------------

  renderPanel() {
    const i = this.selected;
    this.root.classList.toggle('with-panel', i >= 0);
    if (i < 0) {
      this.panel.hidden = true;
      this.panel.textContent = '';
      return;
    }
    renderSpanPanel(this.panel, this.t, i, this.linkedTraces);
    this.panel.hidden = false;
  }

  async onPanelClick(ev: MouseEvent) {
    const act = (ev.target as Element).closest('[data-act]')?.getAttribute('data-act');
    if (!act) return;
    if (act === 'close') this.select(-1);
    else if (act === 'parent' && this.selected >= 0) {
      const p = this.t.spans[this.selected].parent;
      if (p >= 0) this.select(p, true);
    } else if (act === 'copy-span' && this.selected >= 0) {
      const ok = await copyText(`${location.origin}/trace/${this.t.id}?span=${this.t.spans[this.selected].id}`);
      toast(ok ? 'Link to this span copied' : 'Could not copy: use the address bar');
    }
  }
}
