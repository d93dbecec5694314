// Autocomplete for a text input, in one of two languages.
//
// TraceQL (the query box):
//   span.|resource.|.  → attribute names from /api/v2/search/tags
//   { na               → intrinsics and scopes
//   <tag> = "ch        → values from /api/v2/search/tag/<tag>/values
// Tags (the search page's logfmt picker, `http.status_code=500 resource.region="eu 1"`):
//   htt                → span attribute names as `name=`, resource ones as `resource.name=`
//   name=ch            → values of `.name` (span or resource) or of `resource.name`

import { TagValue, tagNames, tagValues } from './api';
import { h } from './dom';

interface Item {
  label: string;
  insert: string;
  hint: string;
  /** text replaced: [from, to) in the input value */
  from: number;
  to: number;
  /** re-open suggestions after inserting (e.g. after a scope prefix) */
  reopen?: boolean;
}

const INTRINSICS: [string, string][] = [
  ['name', 'span name'],
  ['status', 'ok | error | unset'],
  ['duration', 'span duration'],
  ['kind', 'server | client | …'],
  ['statusMessage', 'status message'],
  ['rootServiceName', 'trace root service'],
  ['rootName', 'trace root span name'],
  ['traceDuration', 'trace duration'],
  ['trace:id', 'trace ID'],
  ['span:id', 'span ID'],
];
const SCOPES: [string, string][] = [
  ['resource.', 'resource attribute'],
  ['span.', 'span attribute'],
  ['.', 'any attribute'],
];

let tagsPromise: Promise<Record<string, string[]>> | null = null;
function allTags(): Promise<Record<string, string[]>> {
  if (!tagsPromise) {
    tagsPromise = tagNames('').catch(() => {
      tagsPromise = null;
      return {};
    });
  }
  return tagsPromise;
}

const valueCache = new Map<string, Promise<TagValue[]>>();
function valuesFor(tag: string, range: { start: number; end: number }): Promise<TagValue[]> {
  // a cache per tag and minute-rounded range: typing doesn't refetch
  const key = `${tag}|${Math.floor(range.start / 60)}|${Math.floor(range.end / 60)}`;
  let p = valueCache.get(key);
  if (!p) {
    p = tagValues(tag, { start: range.start, end: range.end }).catch(() => {
      valueCache.delete(key);
      return [];
    });
    valueCache.set(key, p);
  }
  return p;
}

function quote(s: string): string {
  return `"${s.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;
}

export function formatValue(v: TagValue): string {
  if (v.type === 'string') return quote(v.value);
  return v.value; // int, float, bool, keyword (status, kind), duration
}

/** What to suggest, and where the list opens (a character position in the input). */
interface Suggestions {
  items: Item[];
  anchor: number;
}

const TAG_VALUE_RE = /(?:^|\s)([^\s="]+)=("?)((?:[^"\\]|\\.)*)$/;
const TAG_KEY_RE = /(?:^|\s)([^\s="]*)$/;

/** Suggestions for the logfmt tags picker at the caret; null closes the list. */
async function tagSuggestions(before: string, caret: number, range: { start: number; end: number }): Promise<Suggestions | null> {
  let m = TAG_VALUE_RE.exec(before);
  if (m) {
    const key = m[1];
    const partial = m[3].toLowerCase();
    const from = caret - m[2].length - m[3].length;
    // the picker reads an unscoped key as `.key`: span or resource attribute
    const tag = /^(span|resource)?\./.test(key) ? key : `.${key}`;
    const items: Item[] = [];
    for (const v of await valuesFor(tag, range)) {
      if (partial && !v.value.toLowerCase().includes(partial)) continue;
      const insert = v.value === '' || /[\s"\\]/.test(v.value) ? quote(v.value) : v.value;
      items.push({ label: v.value, insert, hint: v.type, from, to: caret });
    }
    items.sort((a, b) => Number(!a.label.toLowerCase().startsWith(partial)) - Number(!b.label.toLowerCase().startsWith(partial)));
    return { items, anchor: from };
  }
  m = TAG_KEY_RE.exec(before);
  if (!m) return null;
  const partial = m[1].toLowerCase();
  const from = caret - m[1].length;
  const tags = await allTags();
  const items: Item[] = [];
  for (const [scope, prefix] of [['span', ''], ['resource', 'resource.']]) {
    for (const t of tags[scope] || []) {
      const name = `${prefix}${t}`;
      if (partial && !name.toLowerCase().includes(partial)) continue;
      items.push({ label: name, insert: `${name}=`, hint: scope, from, to: caret, reopen: true });
    }
  }
  items.sort((a, b) => Number(!a.label.toLowerCase().startsWith(partial)) - Number(!b.label.toLowerCase().startsWith(partial)));
  return { items, anchor: from };
}

const VALUE_RE = /((?:\b(?:span|resource))?\.[\w.\-/:]+|\b[a-zA-Z][\w:]*)\s*(=|!=|=~|!~)\s*("?)((?:[^"\\]|\\.)*)$/;
const ATTR_RE = /(^|[\s{(!&|])((?:span|resource)?\.)([\w.\-/:]*)$/;
const WORD_RE = /(^|[\s{(!&|])([a-zA-Z][\w:]*)?$/;

/** Suggestions for TraceQL at the caret; null closes the list. */
async function traceqlSuggestions(before: string, caret: number, range: { start: number; end: number }): Promise<Suggestions | null> {
  // only inside braces
  const open = (before.match(/\{/g) || []).length;
  const closed = (before.match(/\}/g) || []).length;
  if (open <= closed) return null;

  let m = VALUE_RE.exec(before);
  if (m) {
    const tag = m[1];
    const partial = m[4].toLowerCase();
    const from = caret - m[3].length - m[4].length;
    const items: Item[] = [];
    for (const v of await valuesFor(tag, range)) {
      if (partial && !v.value.toLowerCase().includes(partial)) continue;
      items.push({ label: v.value, insert: formatValue(v), hint: v.type, from, to: caret });
    }
    items.sort((a, b) => Number(!a.label.toLowerCase().startsWith(partial)) - Number(!b.label.toLowerCase().startsWith(partial)));
    return { items, anchor: from };
  }

  m = ATTR_RE.exec(before);
  if (m) {
    const prefix = m[2];
    const scope = prefix === '.' ? '' : prefix.slice(0, -1);
    const partial = m[3].toLowerCase();
    const from = caret - prefix.length - m[3].length;
    const tags = await allTags();
    const items: Item[] = [];
    const seen = new Set<string>();
    for (const sc of scope ? [scope] : ['span', 'resource']) {
      for (const t of tags[sc] || []) {
        if (partial && !t.toLowerCase().includes(partial)) continue;
        const insert = `${prefix}${t}`;
        if (seen.has(insert)) continue;
        seen.add(insert);
        items.push({ label: insert, insert, hint: sc, from, to: caret });
      }
    }
    items.sort((a, b) => Number(!a.label.toLowerCase().startsWith(prefix + partial)) - Number(!b.label.toLowerCase().startsWith(prefix + partial)));
    return { items, anchor: from };
  }

  m = WORD_RE.exec(before);
  if (!m) return null;
  const word = (m[2] || '').toLowerCase();
  // only right after "{", "&&", "||", "(" or while typing a word
  const prev = before.slice(0, caret - word.length).trimEnd();
  if (!word && !/[{(&|!]$/.test(prev)) return null;
  const from = caret - word.length;
  const items: Item[] = [];
  for (const [s, hint] of SCOPES) if (s.startsWith(word) || !word) items.push({ label: s, insert: s, hint, from, to: caret, reopen: true });
  for (const [s, hint] of INTRINSICS) if (s.toLowerCase().startsWith(word)) items.push({ label: s, insert: s, hint, from, to: caret });
  if (word && items.length === 1 && items[0].label.toLowerCase() === word) return null;
  return { items, anchor: from };
}

/**
 * Opens suggestions under `input` as the user types (TraceQL, or with `tags` the logfmt tags
 * picker), in a list appended to the input's parent, which must be positioned. Enter or Tab
 * accepts the highlighted suggestion; Enter with the list closed calls `onSubmit`.
 */
export function attachAutocomplete(
  input: HTMLInputElement,
  getRange: () => { start: number; end: number },
  onSubmit: () => void,
  opts: { tags?: boolean; listId?: string } = {},
): { close(): void } {
  const listId = opts.listId ?? 'traceql-ac';
  const list = h('ul', { class: 'ac-list', role: 'listbox', id: listId });
  list.hidden = true;
  input.parentElement!.appendChild(list);
  input.setAttribute('autocomplete', 'off');
  input.setAttribute('spellcheck', 'false');
  input.setAttribute('aria-autocomplete', 'list');
  input.setAttribute('aria-controls', listId);

  void allTags(); // prefetch: the first "span." should not wait for the network
  let items: Item[] = [];
  let active = 0;
  let seq = 0;

  const measure = document.createElement('canvas').getContext('2d');
  function caretX(pos: number): number {
    if (!measure) return 0;
    const cs = getComputedStyle(input);
    measure.font = `${cs.fontSize} ${cs.fontFamily}`;
    const w = measure.measureText(input.value.slice(0, pos)).width;
    const x = parseFloat(cs.paddingLeft) + w - input.scrollLeft;
    return Math.max(0, Math.min(x, input.clientWidth - 240));
  }

  function close() {
    list.hidden = true;
    items = [];
    input.setAttribute('aria-expanded', 'false');
  }

  function show(next: Item[], anchor: number) {
    items = next.slice(0, 50);
    active = 0;
    if (!items.length || document.activeElement !== input) {
      close();
      return;
    }
    list.textContent = '';
    items.forEach((it, i) => {
      list.appendChild(
        h(
          'li',
          { class: i === active ? 'active' : '', role: 'option', 'data-i': i },
          h('span', { class: 'ac-label' }, it.label),
          h('span', { class: 'ac-hint' }, it.hint),
        ),
      );
    });
    list.style.left = `${caretX(anchor)}px`;
    list.hidden = false;
    input.setAttribute('aria-expanded', 'true');
  }

  function highlight() {
    Array.from(list.children).forEach((li, i) => li.classList.toggle('active', i === active));
    (list.children[active] as HTMLElement | undefined)?.scrollIntoView({ block: 'nearest' });
  }

  function accept(it: Item) {
    const v = input.value;
    let insert = it.insert;
    let to = it.to;
    // close an already-open string instead of doubling the quote
    if (insert.endsWith('"') && v[to] === '"') to++;
    input.value = v.slice(0, it.from) + insert + v.slice(to);
    const caret = it.from + insert.length;
    input.setSelectionRange(caret, caret);
    close();
    input.dispatchEvent(new Event('change'));
    if (it.reopen) void suggest();
  }

  async function suggest() {
    const my = ++seq;
    const caret = input.selectionStart ?? input.value.length;
    const before = input.value.slice(0, caret);
    const found = await (opts.tags ? tagSuggestions : traceqlSuggestions)(before, caret, getRange());
    if (my !== seq) return;
    if (found) show(found.items, found.anchor);
    else close();
  }

  input.addEventListener('input', () => void suggest());
  input.addEventListener('focus', () => void suggest());
  input.addEventListener('blur', () => setTimeout(close, 120));
  input.addEventListener('keydown', (ev) => {
    const openList = !list.hidden && items.length > 0;
    if (ev.key === 'ArrowDown' && openList) {
      active = (active + 1) % items.length;
      highlight();
      ev.preventDefault();
    } else if (ev.key === 'ArrowUp' && openList) {
      active = (active - 1 + items.length) % items.length;
      highlight();
      ev.preventDefault();
    } else if ((ev.key === 'Enter' || ev.key === 'Tab') && openList) {
      accept(items[active]);
      ev.preventDefault();
    } else if (ev.key === 'Escape' && openList) {
      close();
      ev.preventDefault();
    } else if (ev.key === 'Enter') {
      close();
      ev.preventDefault();
      onSubmit();
    } else if (ev.key === ' ' && ev.ctrlKey) {
      void suggest();
      ev.preventDefault();
    }
  });
  list.addEventListener('mousedown', (ev) => {
    const li = (ev.target as Element).closest('li');
    if (!li) return;
    ev.preventDefault();
    const it = items[Number(li.getAttribute('data-i'))];
    if (it) accept(it);
  });
  return { close };
}
