// Open page (/open): pick or drop a trace file (OTLP JSON or Jaeger JSON, as the trace page
// downloads them). The file is read in the browser and nothing is sent to the server; its
// traces open in the trace view (`/trace/<id>?source=file`) with every view.

import { TraceResponse } from '../api';
import { errorBox } from '../components';
import { h, mount } from '../dom';
import { localTraces, parseTraceFile } from '../formats';
import { Page, navigate } from '../router';
import { fmtCount } from '../util';

function spanCount(d: TraceResponse): number {
  let n = 0;
  for (const rs of d.trace?.resourceSpans || []) for (const ss of rs.scopeSpans || []) n += (ss.spans || []).length;
  return n;
}

export function openPage(): Page {
  document.title = 'Open a trace file · weft';
  const input = h('input', { type: 'file', accept: '.json,application/json', 'data-testid': 'open-file', hidden: true });
  const status = h('div', { class: 'open-status' });
  const drop = h(
    'label',
    { class: 'drop-zone card', 'data-testid': 'drop-zone' },
    input,
    h('div', { class: 'drop-icon', 'aria-hidden': 'true' }, '⇪'),
    h('div', { class: 'drop-title' }, 'Drop a trace file here, or click to pick one'),
    h('div', { class: 'muted' }, 'OTLP JSON ({"resourceSpans": …}, also Tempo’s responses) or Jaeger JSON ({"data": [{"traceID", "spans", "processes"}]})'),
  );
  const el = h(
    'div',
    { class: 'page page-pad open-page' },
    h('h1', { class: 'page-title' }, 'Open a trace file'),
    h('p', { class: 'muted' }, 'The file is read in this browser tab; nothing is sent to weft. The trace page’s Download menu writes both formats.'),
    drop,
    status,
  );

  const read = async (file: File) => {
    mount(status, h('div', { class: 'loading' }, h('span', { class: 'spin' }), h('span', null, `Reading ${file.name}…`)));
    let traces: Map<string, TraceResponse>;
    try {
      traces = parseTraceFile(await file.text());
    } catch (e) {
      mount(status, errorBox(e, `Could not open ${file.name}`));
      return;
    }
    for (const [id, data] of traces) localTraces.set(id, { data, file: file.name });
    if (traces.size === 1) {
      navigate(`/trace/${traces.keys().next().value}?source=file`);
      return;
    }
    const ids = Array.from(traces.keys());
    mount(
      status,
      h('h2', { class: 'open-list-title' }, `${fmtCount(ids.length)} traces in ${file.name}`),
      h(
        'ul',
        { class: 'open-list' },
        ids.map((id) => h('li', null, h('a', { href: `/trace/${id}?source=file`, 'data-testid': 'open-trace' }, h('code', null, id)), h('span', { class: 'muted' }, ` ${fmtCount(spanCount(traces.get(id)!))} spans`))),
      ),
      ids.length >= 2 ? h('p', null, h('a', { class: 'btn', href: `/compare?a=${ids[0]}&b=${ids[1]}` }, 'Compare the first two')) : null,
    );
  };

  input.addEventListener('change', () => {
    const f = input.files?.[0];
    if (f) void read(f);
  });
  const over = (on: boolean) => (ev: DragEvent) => {
    ev.preventDefault();
    drop.classList.toggle('over', on);
  };
  el.addEventListener('dragover', over(true));
  el.addEventListener('dragleave', over(false));
  el.addEventListener('drop', (ev) => {
    ev.preventDefault();
    drop.classList.remove('over');
    const f = ev.dataTransfer?.files?.[0];
    if (f) void read(f);
  });
  return { el };
}
