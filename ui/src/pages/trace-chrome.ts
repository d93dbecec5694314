// The trace page's chrome: the header card, the callouts above the views, and the states before
// a trace is shown (loading, not found, a file no longer open).

import { emptyState } from '../components';
import { copyText, h, toast } from '../dom';
import { Trace } from '../model';
import { fmtAgo, fmtCount, fmtDateTime, fmtDuration, serviceColor } from '../util';

/** The header card: title, trace ID, copy link, stats and the service legend. */
export function traceHeader(t: Trace, truncated: boolean): HTMLElement {
  const rootSpan = t.spans[t.root];
  const copyBtn = h('button', { class: 'btn', type: 'button', title: 'Copy a link to this trace as shown: view, zoom, selected span' }, 'Copy link');
  copyBtn.addEventListener('click', async () => {
    const ok = await copyText(location.href);
    toast(ok ? 'Link to this view of the trace copied' : 'Could not copy: use the address bar');
  });
  const services = Array.from(t.services.entries()).sort((a, b) => b[1] - a[1]);
  const stat = (label: string, value: string | HTMLElement, cls = '') => h('div', { class: `stat ${cls}` }, h('div', { class: 'stat-label' }, label), h('div', { class: 'stat-value' }, value));
  return h(
    'header',
    { class: 'card trace-header' },
    h(
      'div',
      { class: 'th-title' },
      h('span', { class: 'swatch big', style: `background:${serviceColor(rootSpan.service)}` }),
      h('h1', null, h('span', { class: 'svc' }, rootSpan.service), h('span', { class: 'op' }, rootSpan.name)),
      h('code', { class: 'trace-id', title: 'Trace ID' }, t.id),
      h('span', { class: 'spacer' }),
      copyBtn,
    ),
    h(
      'div',
      { class: 'stats' },
      stat('Duration', fmtDuration(t.durationNs)),
      stat('Spans', truncated ? h('span', { title: 'Truncated: the trace has more spans than were returned' }, `${fmtCount(t.spans.length)}+`) : fmtCount(t.spans.length)),
      stat('Services', String(t.services.size)),
      stat('Depth', String(t.maxDepth + 1)),
      stat('Errors', t.errorCount ? h('span', { class: 'badge err' }, fmtCount(t.errorCount)) : '0', t.errorCount ? 'has-err' : ''),
      stat('Started', h('span', { title: new Date(t.startMs).toString() }, `${fmtDateTime(t.startMs)} `, h('span', { class: 'muted' }, `(${fmtAgo(t.startMs)})`))),
    ),
    h(
      'div',
      { class: 'legend' },
      services.slice(0, 24).map(([s, n]) => h('span', { class: 'chip', title: `${n} spans` }, h('span', { class: 'swatch', style: `background:${serviceColor(s)}` }), s, h('span', { class: 'chip-n' }, fmtCount(n)))),
      services.length > 24 ? h('span', { class: 'chip muted' }, `+${services.length - 24} more`) : null,
    ),
  );
}

/** Callouts above the views: a trace from a file, a truncated trace, orphan spans. */
export function traceBanners(t: Trace, truncated: boolean, truncMessage: string, file: string | null): HTMLElement[] {
  const banners: HTMLElement[] = [];
  if (file !== null) {
    banners.push(
      h(
        'div',
        { class: 'callout info', 'data-testid': 'from-file', role: 'status' },
        h('b', null, 'Opened from a file: '),
        h('code', null, file),
        '. The trace is read in this browser tab only; weft did not receive it. ',
        h('a', { href: '/open' }, 'Open another file'),
      ),
    );
  }
  if (truncated) {
    banners.push(
      h(
        'div',
        { class: 'callout warn', 'data-testid': 'truncated', role: 'status' },
        h('b', null, 'This trace is truncated. '),
        truncMessage || 'It is larger than the server returns in one response; only its earliest spans are shown.',
      ),
    );
  }
  if (t.orphanCount) {
    banners.push(
      h('div', { class: 'callout info' }, `${fmtCount(t.orphanCount)} span${t.orphanCount === 1 ? '' : 's'} reference a parent that is not in this trace (not received yet, or dropped); they are shown at the top level.`),
    );
  }
  return banners;
}

/** A trace opened from a file lives in the tab that opened it; a reload forgets it. */
export function fileGone(id: string): HTMLElement {
  return h(
    'div',
    { class: 'page-pad' },
    emptyState(
      'The file is no longer open',
      h(
        'div',
        { class: 'help' },
        h('p', null, 'Trace ', h('code', null, id), ' was opened from a file in another tab or before a reload. Files are read in the browser only and are not kept.'),
        h('div', { class: 'btn-row' }, h('a', { class: 'btn primary', href: '/open' }, 'Open a file…'), h('a', { class: 'btn', href: `/trace/${id}` }, 'Look for it in weft')),
      ),
      'file-gone',
    ),
  );
}

export function loadingSkeleton(id: string): HTMLElement {
  return h(
    'div',
    { class: 'trace-loading' },
    h('div', { class: 'card trace-header' }, h('div', { class: 'skeleton w40', style: 'height:22px' }), h('div', { class: 'skeleton w60', style: 'height:14px;margin-top:12px' })),
    h('div', { class: 'loading' }, h('span', { class: 'spin' }), h('span', null, 'Loading trace '), h('code', null, id)),
    h(
      'div',
      { class: 'card', style: 'padding:8px' },
      Array.from({ length: 10 }, (_, i) =>
        h('div', { class: 'skeleton-row' }, h('span', { class: 'skeleton', style: `width:${20 + (i % 4) * 5}%;margin-left:${(i % 5) * 14}px` }), h('span', { class: 'skeleton', style: `width:${15 + ((i * 7) % 30)}%;margin-left:${(i * 11) % 40}%` })),
      ),
    ),
  );
}

export function notFound(id: string, message: string): HTMLElement {
  return h(
    'div',
    { class: 'page-pad' },
    emptyState(
      'Trace not found',
      h(
        'div',
        { class: 'help' },
        h('p', null, 'weft has no trace with ID ', h('code', null, id), '.'),
        message && !/not found/i.test(message) ? h('p', { class: 'muted' }, `Server said: ${message}`) : null,
        h('p', { class: 'muted' }, 'Check the ID (32 hex characters). A trace may also have passed the retention period, or its spans may not have arrived yet: they are searchable within a second of arriving.'),
        h('div', { class: 'btn-row' }, h('a', { class: 'btn primary', href: '/search' }, '← Back to search'), h('button', { class: 'btn', type: 'button', onclick: () => location.reload() }, 'Retry')),
      ),
      'not-found',
    ),
  );
}
