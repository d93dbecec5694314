// History-API router. The URL is the single source of truth: pages read their state from it and
// change it through navigate(); back/forward re-render through popstate.

export interface Page {
  el: HTMLElement;
  /** Same kind of page, new URL (query changed, back/forward): apply it in place and return
   * true, or return false to have the page rebuilt. */
  update?(url: URL): boolean;
  destroy?(): void;
}

export interface Route {
  kind: string;
  create(url: URL, match: RegExpExecArray): Page;
  pattern: RegExp;
}

let routes: Route[] = [];
let fallback: (url: URL) => Page;
let outlet: HTMLElement;
let current: { kind: string; key: string; page: Page } | null = null;
let onChange: (kind: string) => void = () => {};

export function startRouter(el: HTMLElement, rs: Route[], notFound: (url: URL) => Page, changed: (kind: string) => void): void {
  outlet = el;
  routes = rs;
  fallback = notFound;
  onChange = changed;
  window.addEventListener('popstate', () => render());
  // Same-origin links navigate without a reload (unless modified clicks: new tab etc.).
  document.addEventListener('click', (ev) => {
    if (ev.defaultPrevented || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.altKey) return;
    const a = (ev.target as Element | null)?.closest?.('a');
    if (!a || a.target || a.hasAttribute('download')) return;
    const href = a.getAttribute('href');
    if (!href || href.startsWith('#')) return;
    const url = new URL(a.href, location.href);
    if (url.origin !== location.origin || url.pathname.startsWith('/api/')) return;
    ev.preventDefault();
    navigate(url.pathname + url.search + url.hash);
  });
  render();
}

export function navigate(path: string, replace = false): void {
  const target = new URL(path, location.href);
  if (replace || target.href === location.href) history.replaceState(null, '', path);
  else history.pushState(null, '', path);
  render();
}

/** Rebuilds the current page from the URL (after the tenant changed: every query runs again). */
export function reload(): void {
  current?.page.destroy?.();
  current = null;
  render();
}

/** Change the URL without re-rendering (the page already shows the new state). */
export function replaceUrl(path: string): void {
  history.replaceState(null, '', path);
}

function render(): void {
  const url = new URL(location.href);
  let kind = 'notfound';
  let key = url.pathname;
  let make: () => Page = () => fallback(url);
  for (const r of routes) {
    const m = r.pattern.exec(url.pathname);
    if (m) {
      kind = r.kind;
      // pages with a path parameter (a trace ID) are rebuilt when it changes
      key = m.length > 1 ? `${r.kind}:${m[1]}` : r.kind;
      make = () => r.create(url, m);
      break;
    }
  }
  if (current && current.key === key && current.page.update && current.page.update(url)) {
    onChange(kind);
    return;
  }
  current?.page.destroy?.();
  const page = make();
  current = { kind, key, page };
  outlet.textContent = '';
  outlet.appendChild(page.el);
  window.scrollTo(0, 0);
  onChange(kind);
}
