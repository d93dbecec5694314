// The span detail panel of the trace page: overview, attributes, events, links (a link opens the
// linked trace once weft is known to hold it, checked with a HEAD request), resource and scope.

import { KeyValue, traceExists, valueString } from '../api';
import { h, mount } from '../dom';
import { KIND_NAMES, STATUS_NAMES, Trace, relNs } from '../model';
import { fmtCount, fmtDateTime, fmtDuration, serviceColor } from '../util';

function attrValueString(kv: KeyValue): string {
  return valueString(kv.value);
}

/** Fills `panel` with span `i` of `t`. `linkedTraces` remembers whether weft holds each linked
 * trace looked up so far, by trace ID. */
export function renderSpanPanel(panel: HTMLElement, t: Trace, i: number, linkedTraces: Map<string, boolean>): void {
  const sp = t.spans[i];
  const color = serviceColor(sp.service);
  const field = (k: string, v: string | HTMLElement) => h('div', { class: 'kv', 'data-testid': 'span-field', 'data-key': k }, h('div', { class: 'k' }, k), h('div', { class: 'v' }, v));
  const attrRows = (kvs: KeyValue[], testid = 'attr') =>
    kvs.length
      ? h(
          'div',
          { class: 'kvs' },
          kvs
            .slice()
            .sort((a, b) => a.key.localeCompare(b.key))
            .map((kv) => {
              const v = attrValueString(kv);
              return h('div', { class: 'kv', 'data-testid': testid, 'data-key': kv.key, 'data-value': v }, h('div', { class: 'k', title: kv.key }, kv.key), h('div', { class: `v${kv.value?.stringValue === undefined ? ' typed' : ''}` }, v));
            }),
        )
      : h('p', { class: 'muted small' }, 'none');
  const section = (title: string, count: number | null, ...content: (HTMLElement | null)[]) =>
    h('section', { class: 'panel-section' }, h('h3', null, title, count !== null ? h('span', { class: 'count' }, String(count)) : null), ...content);

  const parent = sp.parent >= 0 ? t.spans[sp.parent] : null;
  const statusEl = h(
    'span',
    null,
    h('span', { class: `badge ${sp.statusCode === 2 ? 'err' : sp.statusCode === 1 ? 'ok' : ''}` }, STATUS_NAMES[sp.statusCode] ?? String(sp.statusCode)),
    sp.statusMessage ? h('span', { class: 'status-msg' }, ` ${sp.statusMessage}`) : null,
  );

  const events = sp.events.map((e) => {
    const off = relNs(t, e.timeUnixNano) - sp.start;
    return h(
      'div',
      { class: 'event' },
      h('div', { class: 'event-head' }, h('span', { class: `ev-dot${/exception|error/i.test(e.name || '') ? ' ev-err' : ''}` }), h('b', null, e.name || '(unnamed)'), h('span', { class: 'muted' }, ` +${fmtDuration(off)}`)),
      e.attributes && e.attributes.length ? attrRows(e.attributes, 'event-attr') : null,
    );
  });
  // A link is clickable once weft is known to hold the linked trace.
  const links = sp.links.map((l) => {
    const tid = (l.traceId || '').toLowerCase();
    const sid = (l.spanId || '').toLowerCase();
    const ids = () => [h('span', { class: 'mono' }, tid), sid ? h('span', { class: 'mono muted' }, ` · ${sid}`) : null];
    const anchor = () =>
      h('a', { href: `/trace/${tid}${sid ? `?span=${sid}` : ''}`, 'data-testid': 'span-link', 'data-trace-id': tid }, ...ids(), tid === t.id ? ' (this trace)' : ' →');
    const target = h('span', { class: 'link-target' });
    const show = (exists: boolean | null) =>
      mount(
        target,
        exists === false
          ? h('span', { 'data-testid': 'span-link-missing', 'data-trace-id': tid, title: 'weft stores no trace with this ID (not sampled, not sent here, or past retention)' }, ...ids(), h('span', { class: 'muted' }, ' not stored'))
          : anchor(),
      );
    const known = tid === t.id ? true : linkedTraces.get(tid);
    if (known !== undefined) show(known);
    else {
      mount(target, h('span', { class: 'muted', 'data-testid': 'span-link-checking' }, ...ids(), ' …'));
      void traceExists(tid).then((exists) => {
        if (exists !== null) linkedTraces.set(tid, exists);
        show(exists);
      });
    }
    return h('div', { class: 'link' }, target, l.attributes && l.attributes.length ? attrRows(l.attributes, 'link-attr') : null);
  });

  const copySpan = h('button', { class: 'btn small', type: 'button', 'data-act': 'copy-span' }, 'Copy link to span');
  const scope = sp.scope;
  mount(
    panel,
    h(
      'div',
      { class: 'panel-head', style: `--c:${color}` },
      h('div', { class: 'panel-title' }, h('span', { class: 'swatch', style: `background:${color}` }), h('span', { class: 'svc' }, sp.service), sp.error ? h('span', { class: 'badge err' }, 'error') : null, h('span', { class: 'spacer' }), h('button', { class: 'btn icon close', type: 'button', 'data-act': 'close', title: 'Close (Esc)', 'aria-label': 'Close' }, '×')),
      h('h2', { class: 'panel-name' }, sp.name || '(no name)'),
      h('div', { class: 'panel-actions' }, copySpan, parent ? h('button', { class: 'btn small', type: 'button', 'data-act': 'parent' }, 'Go to parent') : null),
    ),
    h(
      'div',
      { class: 'panel-body' },
      h(
        'div',
        { class: 'kvs overview' },
        field('Duration', fmtDuration(sp.dur)),
        field('Start', h('span', null, `+${fmtDuration(sp.start)} `, h('span', { class: 'muted' }, fmtDateTime(sp.startMs)))),
        field('Kind', KIND_NAMES[sp.kind] ?? String(sp.kind)),
        field('Status', statusEl),
        field('Span ID', h('code', null, sp.id)),
        field('Parent ID', sp.parentId ? h('code', null, sp.parentId, sp.orphan ? h('span', { class: 'muted' }, ' (missing)') : null) : h('span', { class: 'muted' }, 'root')),
        field('Children', fmtCount(sp.children?.length ?? 0)),
      ),
      section('Span attributes', sp.attrs.length, attrRows(sp.attrs)),
      sp.events.length ? section('Events', sp.events.length, ...events) : null,
      sp.links.length ? section('Links', sp.links.length, ...links) : null,
      section('Resource', (t.resources[sp.resource] || []).length, attrRows(t.resources[sp.resource] || [])),
      section(
        'Instrumentation scope',
        null,
        h('div', { class: 'kvs' }, field('Name', scope?.name || '–'), field('Version', scope?.version || '–')),
        scope?.attributes && scope.attributes.length ? attrRows(scope.attributes, 'scope-attr') : null,
      ),
    ),
  );
}
