// A tiny DOM helper: h() for HTML elements, svg() for SVG elements.
//
//   h('div', { class: 'row', 'data-testid': 'x', onclick: fn }, 'text', child, [more])
//
// Attribute rules: `class` and any string/number value become attributes; functions whose
// key starts with "on" become event listeners; `false`, `null` and `undefined` are skipped;
// `true` sets an empty (boolean) attribute. Children: nodes, strings, numbers, arrays, and
// falsy values (skipped).

export type Child = Node | string | number | null | undefined | false | Child[];
export type AttrValue = string | number | boolean | null | undefined | EventListener | ((ev: never) => void);
export type Attrs = Record<string, AttrValue>;

function apply(el: Element, attrs: Attrs | null | undefined): void {
  if (!attrs) return;
  for (const key in attrs) {
    const v = attrs[key];
    if (v === null || v === undefined || v === false) continue;
    if (typeof v === 'function') {
      el.addEventListener(key.slice(2), v as EventListener);
    } else if (v === true) {
      el.setAttribute(key, '');
    } else if (key === 'value' && 'value' in el) {
      (el as HTMLInputElement).value = String(v);
    } else {
      el.setAttribute(key, String(v));
    }
  }
}

function append(el: Node, children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (typeof c === 'string' || typeof c === 'number') el.appendChild(document.createTextNode(String(c)));
    else el.appendChild(c);
  }
}

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs?: Attrs | null,
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  apply(el, attrs);
  append(el, children);
  return el;
}

const SVG_NS = 'http://www.w3.org/2000/svg';

export function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs?: Attrs | null,
  ...children: Child[]
): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG_NS, tag) as SVGElementTagNameMap[K];
  apply(el, attrs);
  append(el, children);
  return el;
}

/** Replace all children of `el`. */
export function mount(el: Element, ...children: Child[]): void {
  el.textContent = '';
  append(el, children);
}

/** Show a transient message at the bottom of the screen. */
export function toast(message: string): void {
  const el = h('div', { class: 'toast', role: 'status' }, message);
  document.body.appendChild(el);
  requestAnimationFrame(() => el.classList.add('show'));
  setTimeout(() => {
    el.classList.remove('show');
    setTimeout(() => el.remove(), 300);
  }, 1800);
}

/** Copy text to the clipboard; falls back to execCommand where the async API is unavailable
 * (plain-HTTP origins other than localhost are not "secure contexts"). */
export async function copyText(text: string): Promise<boolean> {
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      return true;
    }
  } catch {
    // fall through to the legacy path
  }
  const ta = h('textarea', { style: 'position:fixed;top:-1000px;opacity:0' });
  ta.value = text;
  document.body.appendChild(ta);
  ta.select();
  let ok = false;
  try {
    ok = document.execCommand('copy');
  } catch {
    ok = false;
  }
  ta.remove();
  return ok;
}

export function spinner(label = 'Loading…'): HTMLElement {
  return h('div', { class: 'loading', role: 'status' }, h('span', { class: 'spin' }), h('span', null, label));
}
