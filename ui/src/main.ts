// weft UI entry point: app shell (top bar) + router.

import { h } from './dom';
import { emptyState } from './components';
import { comparePage } from './pages/compare';
import { graphPage } from './pages/graph';
import { monitorPage } from './pages/monitor';
import { openPage } from './pages/open';
import { samplingPage } from './pages/sampling';
import { searchPage } from './pages/search';
import { tracePage } from './pages/trace';
import { Page, navigate, reload, startRouter } from './router';
import { themePicker } from './theme';
import { setTenant, tenantControl } from './tenant';

function notFoundPage(url: URL): Page {
  document.title = 'Not found · weft';
  return {
    el: h(
      'div',
      { class: 'page page-pad' },
      emptyState(
        'Page not found',
        h('div', { class: 'help' }, h('p', null, 'Nothing lives at ', h('code', null, url.pathname), '.'), h('div', { class: 'btn-row' }, h('a', { class: 'btn primary', href: '/search' }, 'Go to search'))),
        'not-found',
      ),
    ),
  };
}

/** Where "Go to trace ID" goes for a bare trace ID, a weft trace URL (its `?span=` and the rest
 * kept) or a Jaeger UI trace URL (`/trace/<id>?uiFind=<spanID>` opens that span). */
function traceJumpPath(input: string): string | null {
  const v = input.trim();
  const m = /(?:^|\/trace\/)([^/?#\s]+)\/?([?#][^\s]*)?$/.exec(v);
  if (!m || (!v.includes('/trace/') && /[/?#]/.test(v))) return null;
  const params = new URLSearchParams((m[2] || '').split('#')[0].replace(/^\?/, ''));
  const find = params.get('uiFind');
  params.delete('uiFind');
  if (find && /^[0-9a-f]{16}$/i.test(find) && !params.has('span')) params.set('span', find.toLowerCase());
  const qs = params.toString();
  const hash = (m[2] || '').includes('#') ? (m[2] || '').slice((m[2] || '').indexOf('#')) : '';
  return `/trace/${encodeURIComponent(m[1])}${qs ? `?${qs}` : ''}${hash}`;
}

function shell(): { outlet: HTMLElement; setActive(kind: string): void } {
  const links: Record<string, HTMLAnchorElement> = {
    search: h('a', { href: '/search', class: 'nav-link' }, 'Search'),
    graph: h('a', { href: '/graph', class: 'nav-link' }, 'Service graph'),
    sampling: h('a', { href: '/sampling', class: 'nav-link' }, 'Sampling'),
    monitor: h('a', { href: '/monitor', class: 'nav-link' }, 'Monitor'),
    open: h('a', { href: '/open', class: 'nav-link', title: 'Open a trace from an OTLP or Jaeger JSON file' }, 'Open file'),
  };
  const idInput = h('input', { class: 'input jump', placeholder: 'Go to trace ID…', 'aria-label': 'Go to trace ID', spellcheck: 'false' });
  const jump = h('form', { class: 'jump-form', role: 'search' }, idInput);
  jump.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const to = traceJumpPath(idInput.value);
    if (to) {
      idInput.value = '';
      idInput.blur();
      navigate(to);
    }
  });
  const bar = h(
    'header',
    { class: 'topbar' },
    h('a', { class: 'brand', href: '/search', 'aria-label': 'weft home' }, logo(), h('span', null, 'weft')),
    h('nav', { class: 'nav' }, links.search, links.monitor, links.graph, links.sampling),
    h('span', { class: 'spacer' }),
    links.open,
    tenantControl(reload),
    jump,
    themePicker(),
  );
  const outlet = h('main', { class: 'outlet', id: 'main' });
  document.body.append(bar, outlet);
  return {
    outlet,
    setActive(kind) {
      for (const k in links) links[k].classList.toggle('active', k === kind);
      for (const k in links) if (k === kind) links[k].setAttribute('aria-current', 'page');
      else links[k].removeAttribute('aria-current');
    },
  };
}

function logo(): HTMLElement {
  const s = h('span', { class: 'logo', 'aria-hidden': 'true' });
  s.innerHTML =
    '<svg width="22" height="22" viewBox="0 0 22 22"><rect x="2" y="3" width="12" height="4" rx="2" fill="#4e79a7"/><rect x="6" y="9" width="14" height="4" rx="2" fill="#f28e2b"/><rect x="9" y="15" width="8" height="4" rx="2" fill="#59a14f"/></svg>';
  return s;
}

function start() {
  // a link may name the tenant (?tenant=): it becomes this browser's tenant
  const u = new URL(location.href);
  const t = u.searchParams.get('tenant');
  if (t !== null) {
    setTenant(t);
    u.searchParams.delete('tenant');
    history.replaceState(null, '', u.pathname + u.search + u.hash);
  }
  const { outlet, setActive } = shell();
  startRouter(
    outlet,
    [
      { kind: 'search', pattern: /^\/(?:search\/?)?$/, create: (url) => searchPage(url) },
      { kind: 'trace', pattern: /^\/trace\/([^/]+)\/?$/, create: (url, m) => tracePage(url, m) },
      { kind: 'graph', pattern: /^\/graph\/?$/, create: (url) => graphPage(url) },
      { kind: 'sampling', pattern: /^\/sampling\/?$/, create: (url) => samplingPage(url) },
      { kind: 'monitor', pattern: /^\/monitor\/?$/, create: (url) => monitorPage(url) },
      { kind: 'compare', pattern: /^\/compare\/?$/, create: (url) => comparePage(url) },
      { kind: 'open', pattern: /^\/open\/?$/, create: () => openPage() },
    ],
    notFoundPage,
    (kind) => setActive(kind === 'trace' ? '' : kind),
  );
  // "/" focuses the most useful input on the page
  document.addEventListener('keydown', (ev) => {
    if (ev.key !== '/' || ev.ctrlKey || ev.metaKey) return;
    const t = ev.target as HTMLElement;
    if (t.closest('input, textarea, select')) return;
    const target = document.querySelector<HTMLInputElement>('[data-testid="traceql"], [data-testid="find"]');
    if (target) {
      ev.preventDefault();
      target.focus();
    }
  });
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
else start();
