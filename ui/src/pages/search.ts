// Search page: builder pickers + TraceQL box, scatter plot of results, sortable results table.

import { ApiError, SearchResponse, SearchTrace, hasAnyData, search, tagValues } from '../api';
import { attachAutocomplete } from '../autocomplete';
import { emptyState, errorBox, sendDataHelp, timeRangePicker } from '../components';
import { h, mount, svg } from '../dom';
import { Page, navigate, replaceUrl } from '../router';
import {
  TimeRange,
  fmtAgo,
  fmtCount,
  fmtDateTime,
  fmtMs,
  fmtTime,
  nsStringToMs,
  parseDuration,
  readTimeRange,
  serviceColor,
  timeRangeLabel,
  timeTicks,
  writeTimeRange,
} from '../util';

interface Row {
  id: string;
  service: string;
  op: string;
  startMs: number;
  durationMs: number;
  /** Spans in the trace, and how many of them the query matched. */
  spans: number;
  matched: number;
  /** Spans with status error; null when the server did not say. */
  errors: number | null;
}

type SortKey = 'start' | 'duration' | 'spans' | 'service' | 'errors';

interface State {
  q: string;
  time: TimeRange;
  limit: number;
  minDuration: string;
  maxDuration: string;
  sort: SortKey;
  desc: boolean;
}

const LIMITS = [20, 50, 100, 200, 500];

function readState(url: URL): State {
  const p = url.searchParams;
  const [sk, dir] = (p.get('sort') || 'start:desc').split(':');
  const sort = (['start', 'duration', 'spans', 'service', 'errors'] as SortKey[]).includes(sk as SortKey) ? (sk as SortKey) : 'start';
  const limit = Number(p.get('limit')) || 20;
  return {
    q: p.get('q') ?? '{}',
    time: readTimeRange(p),
    limit: Math.max(1, Math.min(5000, limit)),
    minDuration: p.get('minDuration') || '',
    maxDuration: p.get('maxDuration') || '',
    sort,
    desc: dir !== 'asc',
  };
}

function stateUrl(s: State): string {
  const p = new URLSearchParams();
  p.set('q', s.q);
  writeTimeRange(p, s.time);
  p.set('limit', String(s.limit));
  if (s.minDuration) p.set('minDuration', s.minDuration);
  if (s.maxDuration) p.set('maxDuration', s.maxDuration);
  if (s.sort !== 'start' || !s.desc) p.set('sort', `${s.sort}:${s.desc ? 'desc' : 'asc'}`);
  return `/search?${p.toString()}`;
}

/** A search result's duration: Tempo's search API gives whole milliseconds, so 0 is under 1 ms. */
function fmtTraceMs(ms: number): string {
  return ms < 1 ? '<1 ms' : fmtMs(ms);
}

// --- builder <-> TraceQL -------------------------------------------------------------------

function quote(s: string): string {
  return `"${s.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;
}

interface Builder {
  service: string;
  op: string;
  tags: string;
}

/** logfmt-ish "k=v k2=\"a b\"" → TraceQL conditions; null if malformed. */
function tagsToConditions(tags: string): string[] | null {
  const out: string[] = [];
  const re = /\s*([^\s=]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s"]+)\s*/y;
  let i = 0;
  const s = tags.trim();
  while (i < s.length) {
    re.lastIndex = i;
    const m = re.exec(s);
    if (!m) return null;
    i = re.lastIndex;
    let key = m[1];
    if (!/^(span|resource)?\./.test(key)) key = `.${key}`;
    let v = m[2];
    if (!v.startsWith('"') && !/^-?\d+(\.\d+)?$/.test(v) && v !== 'true' && v !== 'false') v = quote(v);
    out.push(`${key} = ${v}`);
  }
  return out;
}

function builderToQuery(b: Builder): string | null {
  const conds: string[] = [];
  if (b.service) conds.push(`resource.service.name = ${quote(b.service)}`);
  if (b.op) conds.push(`name = ${quote(b.op)}`);
  const t = tagsToConditions(b.tags);
  if (t === null) return null;
  conds.push(...t);
  return conds.length ? `{ ${conds.join(' && ')} }` : '{}';
}

function unquote(v: string): string {
  return v.startsWith('"') ? v.slice(1, -1).replace(/\\(.)/g, '$1') : v;
}

/** The conditions of `a && b && c`, split at the `&&` outside string literals. */
function splitAnd(s: string): string[] {
  const out: string[] = [];
  let start = 0;
  for (let i = 0; i < s.length; i++) {
    const ch = s[i];
    if (ch === '"') {
      // skip the string literal, escapes included
      for (i++; i < s.length && s[i] !== '"'; i++) if (s[i] === '\\') i++;
    } else if (ch === '&' && s[i + 1] === '&') {
      out.push(s.slice(start, i));
      start = i + 2;
      i++;
    }
  }
  out.push(s.slice(start));
  return out;
}

/** The inverse, for queries of the builder's shape; null when the query is anything else. */
function queryToBuilder(q: string): Builder | null {
  const m = /^\s*\{\s*([\s\S]*?)\s*\}\s*$/.exec(q);
  if (!m) return null;
  const b: Builder = { service: '', op: '', tags: '' };
  if (!m[1]) return b;
  const tags: string[] = [];
  for (const raw of splitAnd(m[1])) {
    const c = /^\s*(resource\.service\.name|name|(?:span|resource)?\.[\w.\-/:]+)\s*=\s*("(?:[^"\\]|\\.)*"|[\w.\-]+)\s*$/.exec(raw);
    if (!c) return null;
    if (c[1] === 'resource.service.name' && !b.service && c[2].startsWith('"')) b.service = unquote(c[2]);
    else if (c[1] === 'name' && !b.op && c[2].startsWith('"')) b.op = unquote(c[2]);
    else if (c[1] === 'name' || c[1] === 'resource.service.name') return null;
    else {
      const key = c[1].startsWith('.') ? c[1].slice(1) : c[1];
      const v = c[2].startsWith('"') && /[\s"]/.test(unquote(c[2])) ? c[2] : unquote(c[2]);
      tags.push(`${key}=${v}`);
    }
  }
  b.tags = tags.join(' ');
  return b;
}

// --- page ----------------------------------------------------------------------------------

export function searchPage(url: URL): Page {
  let state = readState(url);
  let abort: AbortController | null = null;

  const form = queryForm(() => state);
  const results = resultsView(() => state);
  const el = h('div', { class: 'page search-page' }, form.el, results.el);
  linkHover(el);

  // --- running
  async function run() {
    abort?.abort();
    const ctl = new AbortController();
    abort = ctl;
    const t = readTimeRange(new URL(location.href).searchParams);
    state.time = t;
    form.picker.set(t);
    form.runBtn.disabled = true;
    form.runBtn.classList.add('busy');
    results.loading(t);
    const t0 = performance.now();
    try {
      const resp = await search(
        { q: state.q, limit: state.limit, start: t.start, end: t.end, minDuration: state.minDuration, maxDuration: state.maxDuration, spss: 3 },
        ctl.signal,
      );
      if (ctl.signal.aborted) return;
      const rows = results.setResponse(resp);
      const took = performance.now() - t0;
      const noData = !rows.length && !(await hasAnyData(ctl.signal));
      if (ctl.signal.aborted) return;
      results.render(took, noData);
    } catch (e) {
      if ((e as Error).name === 'AbortError') return;
      results.failed(e);
    } finally {
      if (abort === ctl) {
        form.runBtn.disabled = false;
        form.runBtn.classList.remove('busy');
      }
    }
  }

  form.apply(state);
  void form.loadServices();
  document.title = 'Search · weft';
  // render and run once attached
  queueMicrotask(() => void run());

  return {
    el,
    update(u: URL) {
      state = readState(u);
      form.apply(state);
      document.title = 'Search · weft';
      void run();
      return true;
    },
    destroy() {
      abort?.abort();
      results.destroy();
    },
  };
}

/** Highlights a trace's dot and table row together while the pointer is over either. */
function linkHover(el: HTMLElement) {
  const hover = (id: string | null) => {
    for (const e of el.querySelectorAll('.hover')) e.classList.remove('hover');
    if (!id) return;
    for (const e of el.querySelectorAll(`[data-trace-id="${CSS.escape(id)}"]`)) e.classList.add('hover');
  };
  el.addEventListener('mouseover', (ev) => {
    const t = (ev.target as Element).closest('[data-trace-id]');
    hover(t ? t.getAttribute('data-trace-id') : null);
  });
}

// --- query form ----------------------------------------------------------------------------

/** Creates the query form's inputs, empty until the form applies a state to them. */
function formControls() {
  return {
    serviceSel: h('select', { class: 'input', id: 'f-service' }, h('option', { value: '' }, 'All services')),
    opSel: h('select', { class: 'input', id: 'f-op' }, h('option', { value: '' }, 'All operations')),
    tagsIn: h('input', { class: 'input mono', id: 'f-tags', placeholder: 'e.g. http.status_code=500 region="us-east-1"', spellcheck: 'false' }),
    minIn: h('input', { class: 'input', id: 'f-min', placeholder: 'e.g. 100ms', size: 8, spellcheck: 'false' }),
    maxIn: h('input', { class: 'input', id: 'f-max', placeholder: 'e.g. 5s', size: 8, spellcheck: 'false' }),
    limitSel: h('select', { class: 'input', id: 'f-limit' }, LIMITS.map((l) => h('option', { value: l }, String(l)))),
    qIn: h('input', {
      class: 'input mono traceql',
      'data-testid': 'traceql',
      'aria-label': 'TraceQL query',
      placeholder: '{ resource.service.name = "checkout" && status = error }',
    }),
    runBtn: h('button', { class: 'btn primary', 'data-testid': 'search-run', type: 'submit' }, 'Run query'),
    builderNote: h('span', { class: 'builder-note muted' }),
  };
}

type FormControls = ReturnType<typeof formControls>;

/** Lays the inputs, the time range picker and the run button out as the query form. */
function formLayout(c: FormControls, picker: HTMLElement): HTMLFormElement {
  const field = (label: string, forId: string, ctl: HTMLElement, cls = '') =>
    h('label', { class: `field ${cls}`, for: forId }, h('span', { class: 'field-label' }, label), ctl);

  const qWrap = h('div', { class: 'traceql-wrap' }, h('span', { class: 'ql-badge' }, 'TraceQL'), c.qIn);
  return h(
    'form',
    { class: 'card query-panel', autocomplete: 'off' },
    h(
      'div',
      { class: 'builder' },
      field('Service', 'f-service', c.serviceSel),
      field('Operation', 'f-op', c.opSel),
      field('Tags', 'f-tags', h('div', { class: 'ac-wrap' }, c.tagsIn), 'grow'),
      field('Min duration', 'f-min', c.minIn, 'narrow'),
      field('Max duration', 'f-max', c.maxIn, 'narrow'),
      field('Limit', 'f-limit', c.limitSel, 'narrow'),
    ),
    h('div', { class: 'query-row' }, qWrap, picker, c.runBtn),
    c.builderNote,
  );
}

/** The query form: submitting it (or picking a new time range) navigates to the URL of the
 * search it describes, the current state with the form's values. */
function queryForm(current: () => State) {
  const c = formControls();
  // a new time range re-runs the query (and refreshes the pickers' values)
  const picker = timeRangePicker(current().time, (t) => {
    current().time = t;
    void builder.loadServices();
    submit();
  });
  const form = formLayout(c, picker.el);
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    submit();
  });
  attachAutocomplete(c.qIn, () => picker.get(), submit);
  attachAutocomplete(c.tagsIn, () => picker.get(), submit, { tags: true, listId: 'tags-ac' });
  const builder = builderSync(c, form, () => picker.get());
  for (const inp of [c.minIn, c.maxIn]) {
    inp.addEventListener('input', () => inp.classList.toggle('invalid', !!inp.value.trim() && isNaN(parseDuration(inp.value))));
  }

  function submit() {
    const minD = normDuration(c.minIn.value);
    const maxD = normDuration(c.maxIn.value);
    c.minIn.classList.toggle('invalid', minD === null);
    c.maxIn.classList.toggle('invalid', maxD === null);
    if (minD === null || maxD === null) return;
    const next: State = {
      ...current(),
      q: c.qIn.value.trim() || '{}',
      time: picker.get(),
      limit: Number(c.limitSel.value) || 20,
      minDuration: minD,
      maxDuration: maxD,
    };
    navigate(stateUrl(next));
  }

  return {
    el: form,
    picker,
    runBtn: c.runBtn,
    loadServices: builder.loadServices,
    /** Shows a state's query, time range, duration limits and result limit in the form. */
    apply(s: State) {
      c.qIn.value = s.q;
      picker.set(s.time);
      c.minIn.value = s.minDuration;
      c.maxIn.value = s.maxDuration;
      if (!LIMITS.includes(s.limit)) c.limitSel.appendChild(h('option', { value: s.limit }, String(s.limit)));
      c.limitSel.value = String(s.limit);
      builder.syncFromQuery();
    },
  };
}

/** Keeps the builder pickers (service, operation, tags) and the TraceQL box in step, and fills
 * the pickers' lists from the tag values of `range()`. */
function builderSync(c: FormControls, form: HTMLFormElement, range: () => TimeRange) {
  const { serviceSel, opSel, tagsIn, qIn, builderNote } = c;

  function builderChanged() {
    const q = builderToQuery({ service: serviceSel.value, op: opSel.value, tags: tagsIn.value });
    markTags();
    if (q !== null) qIn.value = q;
    builderNote.textContent = '';
  }
  /** Marks the tags field when it does not parse; a key still being typed is not an error yet. */
  function markTags() {
    const typingKey = document.activeElement === tagsIn && /(?:^|\s)[^\s="]+$/.test(tagsIn.value);
    tagsIn.classList.toggle('invalid', tagsToConditions(tagsIn.value) === null && !typingKey);
  }
  serviceSel.addEventListener('change', () => {
    opSel.value = '';
    builderChanged();
    void loadOperations(serviceSel.value, '');
  });
  opSel.addEventListener('change', builderChanged);
  tagsIn.addEventListener('input', builderChanged);
  tagsIn.addEventListener('change', builderChanged); // a suggestion was accepted
  tagsIn.addEventListener('blur', markTags);
  qIn.addEventListener('input', syncBuilderFromQuery);
  qIn.addEventListener('change', syncBuilderFromQuery);

  function syncBuilderFromQuery() {
    const b = queryToBuilder(qIn.value);
    form.classList.toggle('custom-query', !b);
    if (!b) {
      builderNote.textContent = 'The query is more than the pickers can show; edit it directly or change a picker to start over.';
      return;
    }
    builderNote.textContent = '';
    setSelect(serviceSel, b.service, 'All services');
    const opChanged = opSel.dataset.service !== b.service;
    if (opChanged) void loadOperations(b.service, b.op);
    else setSelect(opSel, b.op, 'All operations');
    tagsIn.value = b.tags;
    tagsIn.classList.remove('invalid');
  }

  async function loadServices() {
    const t = range();
    try {
      const vals = await tagValues('resource.service.name', { start: t.start, end: t.end });
      const names = vals.map((v) => v.value).sort((a, b) => a.localeCompare(b));
      const cur = serviceSel.value;
      mount(serviceSel, h('option', { value: '' }, 'All services'), names.map((n) => h('option', { value: n }, n)));
      setSelect(serviceSel, cur, 'All services');
    } catch {
      // keep the current list
    }
  }

  async function loadOperations(service: string, select: string) {
    // Until the service's operations arrive the list holds none of another service's.
    if (opSel.dataset.service !== service) {
      mount(opSel, h('option', { value: '' }, 'Loading operations…'), select ? h('option', { value: select }, select) : null);
      opSel.value = select;
      opSel.setAttribute('aria-busy', 'true');
    }
    opSel.dataset.service = service;
    const t = range();
    try {
      const vals = await tagValues('name', {
        q: service ? `{ resource.service.name = ${quote(service)} }` : undefined,
        start: t.start,
        end: t.end,
      });
      if (opSel.dataset.service !== service) return;
      const names = vals.map((v) => v.value).sort((a, b) => a.localeCompare(b));
      mount(opSel, h('option', { value: '' }, 'All operations'), names.map((n) => h('option', { value: n }, n)));
    } catch {
      // leave the list as it is
    }
    opSel.removeAttribute('aria-busy');
    setSelect(opSel, select, 'All operations');
  }

  return { syncFromQuery: syncBuilderFromQuery, loadServices };
}

/** Selects `value` in a picker, adding it as an option when the list lacks it. */
function setSelect(sel: HTMLSelectElement, value: string, allLabel: string) {
  if (value && !Array.from(sel.options).some((o) => o.value === value)) sel.appendChild(h('option', { value }, value));
  sel.value = value;
  if (!value && sel.options.length && sel.options[0].textContent !== allLabel) sel.options[0].textContent = allLabel;
}

/** A duration field's value as the API takes it: '' when empty, null when it does not parse. */
function normDuration(s: string): string | null {
  const v = s.trim();
  if (!v) return '';
  if (isNaN(parseDuration(v))) return null;
  return /^\d+(\.\d+)?$/.test(v) ? `${v}ms` : v.replace('µs', 'us');
}

// --- results -------------------------------------------------------------------------------

/** The results area: a summary line, the scatter plot and the sortable table of the last search,
 * sorted as `current()` says (a click on a column header changes it). */
function resultsView(current: () => State) {
  let rows: Row[] = [];
  let lastResponse: SearchResponse | null = null;
  let resizeObs: ResizeObserver | null = null;

  const summary = h('div', { class: 'results-summary' });
  const chartBox = h('div', { class: 'card chart-card' });
  const tableBox = h('div', { class: 'card table-card' });
  const el = h('section', { class: 'results' }, summary, chartBox, tableBox);

  function renderResults(tookMs: number, noData: boolean) {
    const state = current();
    chartBox.hidden = false;
    if (!rows.length) {
      mount(summary);
      mount(chartBox);
      chartBox.hidden = true;
      mount(tableBox, noResults(state, noData));
      return;
    }
    const m = lastResponse?.metrics || {};
    const inspected = Number(m['inspectedSpans'] || 0);
    mount(
      summary,
      h('b', null, `${fmtCount(rows.length)} trace${rows.length === 1 ? '' : 's'}`),
      rows.length >= state.limit ? h('span', { class: 'muted' }, ` (limit ${state.limit}: there may be more)`) : null,
      h('span', { class: 'muted' }, ` · ${timeRangeLabel(state.time).toLowerCase()} · ${Math.round(tookMs)} ms`),
      inspected ? h('span', { class: 'muted' }, ` · ${fmtCount(inspected)} spans inspected`) : null,
    );
    renderChart();
    renderTable();
  }

  // --- chart
  function renderChart() {
    if (!rows.length) return;
    const width = Math.max(320, chartBox.clientWidth || 1000);
    mount(chartBox, scatter(rows, width));
  }

  // --- table
  function renderTable() {
    if (!rows.length) return;
    mount(tableBox, resultsTable(rows, current()));
  }

  tableBox.addEventListener('click', (ev) => {
    const target = ev.target as Element;
    const th = target.closest('th[data-sort]');
    if (th) {
      const state = current();
      const key = th.getAttribute('data-sort') as SortKey;
      if (state.sort === key) state.desc = !state.desc;
      else {
        state.sort = key;
        state.desc = key !== 'service';
      }
      replaceUrl(stateUrl(state));
      renderTable();
      return;
    }
    if (target.closest('a')) return; // the link navigates itself
    const tr = target.closest('tr[data-trace-id]');
    if (tr) {
      const id = tr.getAttribute('data-trace-id')!;
      if ((ev as MouseEvent).ctrlKey || (ev as MouseEvent).metaKey) window.open(`/trace/${id}`, '_blank');
      else navigate(`/trace/${id}`);
    }
  });
  tableBox.addEventListener('keydown', (ev) => {
    const th = (ev.target as Element).closest('th[data-sort]');
    if (th && (ev.key === 'Enter' || ev.key === ' ')) {
      ev.preventDefault();
      (th as HTMLElement).click();
    }
  });
  chartBox.addEventListener('click', (ev) => {
    const dot = (ev.target as Element).closest('[data-testid="scatter-dot"]');
    if (dot) navigate(`/trace/${dot.getAttribute('data-trace-id')}`);
  });

  if (typeof ResizeObserver !== 'undefined') {
    let lastW = 0;
    resizeObs = new ResizeObserver(() => {
      const w = chartBox.clientWidth;
      if (w && Math.abs(w - lastW) > 4 && rows.length) {
        lastW = w;
        renderChart();
      }
    });
    resizeObs.observe(chartBox);
  }

  return {
    el,
    /** Shows placeholders while the search of time range `t` runs. */
    loading(t: TimeRange) {
      mount(summary, h('span', { class: 'spin' }), h('span', { class: 'muted' }, `Searching ${timeRangeLabel(t).toLowerCase()}…`));
      mount(chartBox, h('div', { class: 'skeleton chart-skeleton' }));
      tableBox.classList.remove('bare');
      mount(tableBox, skeletonTable());
    },
    /** Takes a search's response as the results (shown by `render`) and returns their rows. */
    setResponse(resp: SearchResponse): Row[] {
      lastResponse = resp;
      rows = (resp.traces || []).map(toRow);
      return rows;
    },
    render: renderResults,
    /** Shows why the search failed in place of the results. */
    failed(e: unknown) {
      rows = [];
      mount(summary);
      mount(chartBox);
      chartBox.hidden = true;
      tableBox.classList.add('bare');
      mount(tableBox, errorBox(e, (e as ApiError).status === 400 ? 'Invalid query' : 'Query failed'));
    },
    destroy() {
      resizeObs?.disconnect();
    },
  };
}

/** A search result as a table row. */
function toRow(t: SearchTrace): Row {
  const sets = t.spanSets && t.spanSets.length ? t.spanSets : t.spanSet ? [t.spanSet] : [];
  let matched = 0;
  for (const s of sets) matched += s.matched ?? s.spans?.length ?? 0;
  const stats = Object.values(t.serviceStats || {});
  return {
    id: t.traceID,
    service: t.rootServiceName || '',
    op: t.rootTraceName || '',
    startMs: nsStringToMs(t.startTimeUnixNano),
    durationMs: t.durationMs ?? 0,
    spans: stats.length ? stats.reduce((n, s) => n + (s.spanCount ?? 0), 0) : matched,
    matched,
    errors: t.serviceStats ? stats.reduce((n, s) => n + (s.errorCount ?? 0), 0) : null,
  };
}

/** What shows when a search found nothing: how to send data, or how to widen the search. */
function noResults(state: State, noData: boolean): HTMLElement {
  return noData
    ? emptyState('No traces yet', sendDataHelp())
    : emptyState(
        'No traces match',
        h(
          'div',
          { class: 'help' },
          h('p', null, `Nothing matched `, h('code', null, state.q), ` in ${timeRangeLabel(state.time).toLowerCase()}.`),
          h('p', { class: 'muted' }, 'Try a wider time range, fewer conditions, or drop the duration limits.'),
          h('div', { class: 'btn-row' }, ...QUICK_WIDEN.map(([k, label]) => h('a', { class: 'btn', href: stateUrl({ ...state, time: { range: k, start: 0, end: 0 } }) }, label))),
        ),
      );
}

/** The rows in the state's sort order; ties go newest first. */
function sortRows(rows: Row[], state: State): Row[] {
  const dir = state.desc ? -1 : 1;
  const key = state.sort;
  const f = (r: Row): number | string =>
    key === 'start' ? r.startMs : key === 'duration' ? r.durationMs : key === 'spans' ? r.spans : key === 'errors' ? (r.errors ?? -1) : `${r.service}\u0000${r.op}`;
  return rows.slice().sort((a, b) => {
    const x = f(a);
    const y = f(b);
    return (x < y ? -1 : x > y ? 1 : 0) * dir || (b.startMs - a.startMs);
  });
}

/** The results table, sorted as the state says, with sortable column headers. */
function resultsTable(rows: Row[], state: State): HTMLTableElement {
  const maxDur = Math.max(1, ...rows.map((r) => r.durationMs));
  const now = Date.now();
  const th = (key: SortKey, label: string, cls = '') => {
    const activeSort = state.sort === key;
    return h(
      'th',
      {
        class: `${cls} sortable ${activeSort ? 'sorted' : ''}`,
        'aria-sort': activeSort ? (state.desc ? 'descending' : 'ascending') : 'none',
        'data-sort': key,
        tabindex: 0,
        title: key === 'spans' ? 'Spans in the trace (and how many matched the query)' : key === 'errors' ? 'Spans with status error' : null,
      },
      label,
      h('span', { class: 'sort-ind' }, activeSort ? (state.desc ? '▼' : '▲') : ''),
    );
  };
  const body = h('tbody');
  for (const r of sortRows(rows, state)) body.appendChild(resultRow(r, maxDur, now));
  return h(
    'table',
    { class: 'results-table' },
    h('thead', null, h('tr', null, th('service', 'Root service · operation'), th('spans', 'Spans', 'c-num'), th('errors', 'Errors', 'c-err'), th('duration', 'Duration', 'c-dur'), th('start', 'Started', 'c-time'))),
    body,
  );
}

/** One trace's table row; its duration bar is scaled to `maxDur`, its age measured from `now`. */
function resultRow(r: Row, maxDur: number, now: number): HTMLTableRowElement {
  const href = `/trace/${r.id}`;
  return h(
    'tr',
    { 'data-testid': 'result-row', 'data-trace-id': r.id, class: r.errors ? 'has-error' : '' },
    h(
      'td',
      { class: 'c-trace' },
      h('span', { class: 'swatch', style: `background:${serviceColor(r.service || '?')}` }),
      h(
        'a',
        { href, class: 'trace-link' },
        r.service ? h('b', null, r.service) : h('i', { class: 'muted' }, 'root span not received yet'),
        r.op ? h('span', { class: 'op' }, r.op) : null,
      ),
      h('span', { class: 'trace-id mono' }, r.id.slice(0, 16)),
    ),
    h(
      'td',
      { class: 'c-num', 'data-testid': 'result-spans', 'data-spans': r.spans, 'data-matched': r.matched, title: `${fmtCount(r.spans)} spans, ${fmtCount(r.matched)} matched the query` },
      r.matched < r.spans ? h('span', { class: 'muted small' }, `${fmtCount(r.matched)} of `) : null,
      fmtCount(r.spans),
    ),
    h(
      'td',
      { class: 'c-err', 'data-testid': 'result-errors', 'data-errors': r.errors ?? '' },
      r.errors ? h('span', { class: 'badge err', title: `${fmtCount(r.errors)} span${r.errors === 1 ? '' : 's'} with status error` }, fmtCount(r.errors)) : r.errors === 0 ? h('span', { class: 'muted' }, '–') : h('span', { class: 'muted', title: 'not reported' }, '?'),
    ),
    h(
      'td',
      { class: 'c-dur' },
      h('span', { class: 'dur-bar' }, h('span', { style: `width:${Math.max(1, (r.durationMs / maxDur) * 100).toFixed(1)}%` })),
      h('span', { class: 'dur-text' }, fmtTraceMs(r.durationMs)),
    ),
    h('td', { class: 'c-time', title: new Date(r.startMs).toString() }, h('span', null, fmtAgo(r.startMs, now)), h('span', { class: 'muted abs' }, fmtDateTime(r.startMs))),
  );
}

const QUICK_WIDEN: [string, string][] = [
  ['6h', 'Last 6 hours'],
  ['24h', 'Last 24 hours'],
  ['7d', 'Last 7 days'],
];

function skeletonTable(): HTMLElement {
  return h(
    'div',
    { class: 'skeleton-table', 'aria-hidden': 'true' },
    Array.from({ length: 8 }, () => h('div', { class: 'skeleton-row' }, h('span', { class: 'skeleton w40' }), h('span', { class: 'skeleton w10' }), h('span', { class: 'skeleton w20' }), h('span', { class: 'skeleton w15' }))),
  );
}

// --- scatter plot ----------------------------------------------------------------------------

function scatter(rows: Row[], width: number): SVGSVGElement {
  const H = 200;
  const ml = 60;
  const mr = 18;
  const mt = 24;
  const mb = 28;
  const pw = width - ml - mr;
  const ph = H - mt - mb;

  let x0 = Infinity;
  let x1 = -Infinity;
  let d0 = Infinity;
  let d1 = 0;
  for (const r of rows) {
    x0 = Math.min(x0, r.startMs);
    x1 = Math.max(x1, r.startMs);
    d0 = Math.min(d0, r.durationMs);
    d1 = Math.max(d1, r.durationMs);
  }
  if (x1 - x0 < 2000) {
    x0 -= 1000;
    x1 += 1000;
  }
  const pad = (x1 - x0) * 0.03;
  x0 -= pad;
  x1 += pad;
  const xs = (t: number) => ml + ((t - x0) / (x1 - x0)) * pw;

  const log = d0 > 0 && d1 / Math.max(d0, 0.001) >= 30;
  let ys: (d: number) => number;
  let yTicks: number[];
  if (log) {
    const l0 = Math.log10(Math.max(d0, 0.001)) - 0.1;
    const l1 = Math.log10(d1) + 0.1;
    ys = (d: number) => mt + ph - ((Math.log10(Math.max(d, 0.001)) - l0) / (l1 - l0)) * ph;
    yTicks = [];
    for (let e = Math.floor(l0); e <= Math.ceil(l1); e++) {
      for (const m of [1, 2, 5]) {
        const v = m * Math.pow(10, e);
        const lv = Math.log10(v);
        if (lv >= l0 && lv <= l1) yTicks.push(v);
      }
    }
    if (yTicks.length > 7) yTicks = yTicks.filter((v) => /^1/.test(v.toExponential()));
  } else {
    const top = d1 * 1.1 || 1;
    ys = (d: number) => mt + ph - (d / top) * ph;
    yTicks = [];
    const step = niceStep(top / 4);
    for (let v = 0; v <= top; v += step) yTicks.push(v);
  }

  const root = svg('svg', {
    'data-testid': 'scatter',
    class: 'scatter',
    width,
    height: H,
    viewBox: `0 0 ${width} ${H}`,
    role: 'img',
    'aria-label': `Trace durations over time${log ? ' (log scale)' : ''}`,
  });
  const grid = svg('g', { class: 'grid' });
  for (const v of yTicks) {
    const y = ys(v);
    grid.appendChild(svg('line', { x1: ml, x2: ml + pw, y1: y, y2: y }));
    grid.appendChild(svg('text', { x: ml - 8, y: y + 4, 'text-anchor': 'end' }, fmtMs(v)));
  }
  for (const t of timeTicks(x0, x1, Math.max(2, Math.floor(pw / 110)))) {
    const x = xs(t);
    grid.appendChild(svg('line', { x1: x, x2: x, y1: mt, y2: mt + ph, class: 'v' }));
    grid.appendChild(svg('text', { x, y: H - 8, 'text-anchor': 'middle' }, fmtTime(t)));
  }
  root.appendChild(grid);
  root.appendChild(svg('text', { class: 'axis-title', x: 4, y: 12, 'text-anchor': 'start' }, log ? 'duration (log)' : 'duration'));

  const dots = svg('g', { class: 'dots' });
  // errors drawn last so they stay visible
  const ordered = rows.slice().sort((a, b) => Number(!!a.errors) - Number(!!b.errors));
  for (const r of ordered) {
    const rad = Math.min(9, 3.5 + Math.log2(Math.max(1, r.spans)) * 0.6);
    dots.appendChild(
      svg(
        'circle',
        {
          'data-testid': 'scatter-dot',
          'data-trace-id': r.id,
          class: r.errors ? 'dot err' : 'dot',
          cx: xs(r.startMs).toFixed(1),
          cy: ys(r.durationMs).toFixed(1),
          r: rad.toFixed(1),
          fill: r.errors ? undefined : serviceColor(r.service || '?'),
        },
        svg('title', null, `${r.service || '?'}: ${r.op}\n${fmtTraceMs(r.durationMs)} · ${fmtCount(r.spans)} spans${r.errors ? ` · ${fmtCount(r.errors)} error${r.errors === 1 ? '' : 's'}` : ''}\n${fmtDateTime(r.startMs)}`),
      ),
    );
  }
  root.appendChild(dots);
  return root;
}

function niceStep(raw: number): number {
  const mag = Math.pow(10, Math.floor(Math.log10(raw || 1)));
  const n = raw / mag;
  return (n < 1.5 ? 1 : n < 3 ? 2 : n < 7 ? 5 : 10) * mag;
}
