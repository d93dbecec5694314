// The colour theme: light, dark, or the system's (the default). The choice is remembered per
// browser (localStorage); index.html applies it before the first paint, so a page never
// flashes the other theme while loading.

import { h } from './dom';

export type Theme = 'system' | 'light' | 'dark';
const KEY = 'weft.theme';

export function storedTheme(): Theme {
  try {
    const t = localStorage.getItem(KEY);
    return t === 'light' || t === 'dark' ? t : 'system';
  } catch {
    return 'system';
  }
}

export function applyTheme(t: Theme): void {
  if (t === 'system') delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = t;
}

function saveTheme(t: Theme): void {
  try {
    if (t === 'system') localStorage.removeItem(KEY);
    else localStorage.setItem(KEY, t);
  } catch {
    // private mode without storage: the choice lasts for this page
  }
}

/** The top bar's theme picker; follows a choice made in another tab. */
export function themePicker(): HTMLSelectElement {
  const sel = h(
    'select',
    { class: 'input theme-select', 'aria-label': 'Theme', title: 'Theme', 'data-testid': 'theme' },
    h('option', { value: 'system' }, 'System theme'),
    h('option', { value: 'light' }, 'Light'),
    h('option', { value: 'dark' }, 'Dark'),
  );
  sel.value = storedTheme();
  applyTheme(sel.value as Theme);
  sel.addEventListener('change', () => {
    saveTheme(sel.value as Theme);
    applyTheme(sel.value as Theme);
  });
  window.addEventListener('storage', (ev) => {
    if (ev.key !== KEY && ev.key !== null) return;
    sel.value = storedTheme();
    applyTheme(sel.value as Theme);
  });
  return sel;
}
