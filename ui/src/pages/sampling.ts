// Sampling: what weft tells the Jaeger remote samplers polling it (/sampling on port 5778),
// per service and operation: the root spans a second weft estimates, the probability it
// serves, and the sampled traces a second that arrived (/api/sampling/operations). Refreshes
// every few seconds while open.

import { ApiError, SamplingOperation, SamplingResponse, samplingOperations } from '../api';
import { emptyState, errorBox } from '../components';
import { h, mount } from '../dom';
import { Page } from '../router';
import { serviceColor } from '../util';

const REFRESH_MS = 5000;

function fmtPerSecond(v: number): string {
  if (v === 0) return '0';
  if (v >= 100) return v.toFixed(0);
  if (v >= 1) return v.toFixed(1);
  return v.toPrecision(2);
}

function fmtProbability(p: number): string {
  if (p >= 1) return '100%';
  const pct = p * 100;
  return `${pct >= 1 ? pct.toFixed(1) : pct.toPrecision(2)}%`;
}

function table(ops: SamplingOperation[], target: number | undefined): HTMLTableElement {
  return h(
    'table',
    { class: 'results-table sampling-table', 'data-testid': 'sampling-table' },
    h(
      'thead',
      null,
      h(
        'tr',
        null,
        h('th', null, 'Service'),
        h('th', null, 'Operation'),
        h('th', { class: 'c-num', title: 'Estimated root spans a second, sampled or not' }, 'Root spans/s'),
        h('th', { class: 'c-num', title: 'The probability served to remote samplers' }, 'Probability'),
        h('th', { class: 'c-num', title: 'Sampled traces a second that arrived in the last interval' }, 'Sampled traces/s'),
      ),
    ),
    h(
      'tbody',
      null,
      ops.map((o) =>
        h(
          'tr',
          {
            'data-testid': 'sampling-row',
            'data-service': o.service,
            'data-operation': o.operation,
            'data-probability': String(o.probability),
            class: target !== undefined && o.sampledTracesPerSecond > 2 * target ? 'has-error' : '',
          },
          h('td', null, h('span', { class: 'swatch', style: `background:${serviceColor(o.service)}` }), o.service),
          h('td', { class: 'mono' }, o.operation),
          h('td', { class: 'c-num' }, fmtPerSecond(o.rootSpansPerSecond)),
          h('td', { class: 'c-num', 'data-testid': 'sampling-probability' }, fmtProbability(o.probability)),
          h('td', { class: 'c-num' }, fmtPerSecond(o.sampledTracesPerSecond)),
        ),
      ),
    ),
  );
}

function summary(r: SamplingResponse): HTMLElement {
  if (r.mode === 'file') {
    return h('p', { class: 'muted', 'data-testid': 'sampling-mode' }, 'Strategies come from the file ', h('code', null, r.file || ''), ', served as written.');
  }
  return h(
    'p',
    { class: 'muted', 'data-testid': 'sampling-mode' },
    `Adaptive: every ${r.intervalSeconds ?? 60} s each operation's probability is set for ${r.targetTracesPerSecond ?? 1} sampled trace(s) a second. `,
    `Operations not seen yet start at ${fmtProbability(r.initialProbability ?? 0.001)}. Remote samplers poll `,
    h('code', null, 'http://<weft>:5778/sampling?service=…'),
    '.',
  );
}

export function samplingPage(_url: URL): Page {
  document.title = 'Sampling · weft';
  const body = h('div', { class: 'sampling-body' });
  const head = h('div', { class: 'card query-panel' }, h('h1', { class: 'page-title' }, 'Sampling'));
  const el = h('div', { class: 'page page-pad sampling-page' }, head, body);
  let abort: AbortController | null = null;
  let timer: number | undefined;

  async function load() {
    abort?.abort();
    const ctl = new AbortController();
    abort = ctl;
    try {
      const r = await samplingOperations(ctl.signal);
      if (ctl.signal.aborted) return;
      if (r.mode === 'adaptive' && r.operations.length === 0) {
        mount(
          body,
          summary(r),
          emptyState(
            'No root spans counted yet',
            h('p', { class: 'muted' }, 'Operations appear here once weft has received root spans of them; their probabilities are set at the next interval.'),
            'sampling-empty',
          ),
        );
      } else {
        mount(body, summary(r), r.operations.length ? h('div', { class: 'card table-card' }, table(r.operations, r.targetTracesPerSecond)) : null);
      }
    } catch (e) {
      if (ctl.signal.aborted) return;
      if (e instanceof ApiError && e.status === 404) {
        mount(body, emptyState('Sampling is not served here', h('p', { class: 'muted' }, 'This weft does not receive spans, so it does not count them.'), 'sampling-off'));
      } else {
        mount(body, errorBox(e, 'Could not read sampling'));
      }
    }
    timer = window.setTimeout(load, REFRESH_MS);
  }
  load();
  return {
    el,
    destroy() {
      abort?.abort();
      window.clearTimeout(timer);
    },
  };
}
