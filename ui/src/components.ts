// Shared pieces: error box, empty states, time range picker, page header.

import { ApiError } from './api';
import { h } from './dom';
import { reload } from './router';
import { authPrompt } from './tenant';
import { QUICK_RANGES, TimeRange, fmtDateTime } from './util';

export function errorBox(err: unknown, title = 'Query failed'): HTMLElement {
  const e = err as ApiError;
  // refused for want of a tenant or token: ask for it, not a broken page
  if (e?.status === 401) return authPrompt(e.message, reload);
  const status = typeof e.status === 'number' && e.status > 0 ? ` (HTTP ${e.status})` : '';
  return h(
    'div',
    { class: 'callout error', 'data-testid': 'error', role: 'alert' },
    h('div', { class: 'callout-title' }, h('span', { class: 'icon-err', 'aria-hidden': 'true' }, '!'), `${title}${status}`),
    h('pre', { class: 'error-message' }, e?.message || String(err)),
  );
}

/** How to get data in: shown wherever there is nothing to show yet. */
export function sendDataHelp(): HTMLElement {
  const host = location.hostname || 'localhost';
  return h(
    'div',
    { class: 'help' },
    h('p', null, 'Point any OpenTelemetry SDK or Collector at weft:'),
    h(
      'ul',
      null,
      h('li', null, h('b', null, 'OTLP/gRPC'), ' on port ', h('code', null, '4317')),
      h('li', null, h('b', null, 'OTLP/HTTP'), ' on port ', h('code', null, '4318'), ' (', h('code', null, '/v1/traces'), ', protobuf or JSON)'),
    ),
    h('pre', { class: 'code' }, `export OTEL_TRACES_EXPORTER=otlp\nexport OTEL_EXPORTER_OTLP_ENDPOINT=http://${host}:4318\nexport OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`),
    h(
      'p',
      { class: 'muted' },
      'No application handy? In the weft checkout, ',
      h('code', null, './target/release/weft loadgen --realistic --max-spans 200000'),
      ' sends an hour of realistic traffic between 20 services. Spans are searchable within a second of arriving.',
    ),
  );
}

export function emptyState(title: string, body: HTMLElement | string | null, testid = 'empty'): HTMLElement {
  return h(
    'div',
    { class: 'empty', 'data-testid': testid },
    h('div', { class: 'empty-icon', 'aria-hidden': 'true' }, emptyIcon()),
    h('h2', null, title),
    body,
  );
}

function emptyIcon(): HTMLElement {
  const el = h('span');
  el.innerHTML =
    '<svg width="44" height="44" viewBox="0 0 44 44" fill="none" stroke="currentColor" stroke-width="2"><rect x="4" y="8" width="22" height="6" rx="2"/><rect x="12" y="19" width="26" height="6" rx="2"/><rect x="18" y="30" width="14" height="6" rx="2"/></svg>';
  return el;
}

function toLocalInput(sec: number): string {
  // yyyy-MM-ddTHH:mm for <input type=datetime-local>
  return fmtDateTime(sec * 1000, false).replace(' ', 'T').slice(0, 16);
}
function fromLocalInput(v: string): number {
  const t = new Date(v).getTime();
  return isFinite(t) ? Math.floor(t / 1000) : NaN;
}

/** Quick ranges plus a custom absolute range. Calls onChange with the new range. */
export function timeRangePicker(initial: TimeRange, onChange: (t: TimeRange) => void): {
  el: HTMLElement;
  set(t: TimeRange): void;
  get(): TimeRange;
} {
  let value = initial;
  const sel = h(
    'select',
    { class: 'input', 'aria-label': 'Time range', title: 'Time range' },
    QUICK_RANGES.map((r) => h('option', { value: r.key }, r.label)),
    h('option', { value: 'custom' }, 'Custom range…'),
  );
  const from = h('input', { class: 'input', type: 'datetime-local', 'aria-label': 'From' });
  const to = h('input', { class: 'input', type: 'datetime-local', 'aria-label': 'To' });
  const custom = h('span', { class: 'custom-range' }, from, h('span', { class: 'muted' }, '→'), to);

  const sync = () => {
    sel.value = value.range || 'custom';
    from.value = toLocalInput(value.start);
    to.value = toLocalInput(value.end);
    custom.hidden = !!value.range;
  };
  sel.addEventListener('change', () => {
    if (sel.value === 'custom') {
      value = { range: '', start: value.start, end: value.end };
      custom.hidden = false;
    } else {
      const q = QUICK_RANGES.find((r) => r.key === sel.value)!;
      const now = Math.ceil(Date.now() / 1000);
      value = { range: q.key, start: now - q.seconds, end: now };
      custom.hidden = true;
    }
    onChange(value);
  });
  const onInput = () => {
    const s = fromLocalInput(from.value);
    const e = fromLocalInput(to.value);
    const bad = !(e > s);
    from.classList.toggle('invalid', bad);
    to.classList.toggle('invalid', bad);
    if (!bad) {
      value = { range: '', start: s, end: e };
      onChange(value);
    }
  };
  from.addEventListener('change', onInput);
  to.addEventListener('change', onInput);
  sync();
  return {
    el: h('span', { class: 'time-range' }, sel, custom),
    set(t) {
      value = t;
      sync();
    },
    get: () => value,
  };
}
