// Tenancy as the UI sees it. A weft run with --multitenancy answers 401 to requests without
// X-Scope-OrgID; one with `auth_tokens` answers 401 to requests without a listed bearer token
// (crates/weft-server/src/tenant.rs). The tenant and token picked here are remembered per
// browser (localStorage) and sent on every API request; a 401 opens the picker the server's
// message asks for.

import { h } from './dom';

const TENANT_KEY = 'weft.tenant';
const TOKEN_KEY = 'weft.token';
const RECENT_KEY = 'weft.tenants';

/** What a 401 asks for: a tenant (X-Scope-OrgID) or a bearer token. */
export type AuthNeed = 'tenant' | 'token';

function load(key: string): string {
  try {
    return localStorage.getItem(key) || '';
  } catch {
    return '';
  }
}
function store(key: string, v: string): void {
  try {
    if (v) localStorage.setItem(key, v);
    else localStorage.removeItem(key);
  } catch {
    // no storage (private mode): lasts for this page
  }
}

let tenant = load(TENANT_KEY);
let token = load(TOKEN_KEY);
const needs = new Set<AuthNeed>();
const listeners: (() => void)[] = [];
const changed = () => listeners.forEach((f) => f());

export const currentTenant = (): string => tenant;

/** The headers every API request carries: the tenant and the bearer token, when picked. */
export function authHeaders(): Record<string, string> {
  const out: Record<string, string> = {};
  if (tenant) out['X-Scope-OrgID'] = tenant;
  if (token) out['Authorization'] = `Bearer ${token}`;
  return out;
}

/** What a 401's message asks for (the server's wording: "missing bearer token …", "invalid
 * bearer token", "no org id: the X-Scope-OrgID header is required …", "invalid X-Scope-OrgID"). */
export function authNeed(message: string): AuthNeed {
  return /bearer token|authorization/i.test(message) ? 'token' : 'tenant';
}

/** Records that the server refused a request for want of `need`: the top bar shows its field. */
export function authRequired(need: AuthNeed): void {
  if (needs.has(need)) return;
  needs.add(need);
  changed();
}

function recentTenants(): string[] {
  return load(RECENT_KEY).split('\n').filter(Boolean);
}

/** Picks the tenant (and remembers it among the recent ones); '' sends none. */
export function setTenant(t: string): void {
  tenant = t.trim();
  store(TENANT_KEY, tenant);
  if (tenant) store(RECENT_KEY, [tenant, ...recentTenants().filter((r) => r !== tenant)].slice(0, 12).join('\n'));
  changed();
}

export function setToken(t: string): void {
  token = t.trim();
  store(TOKEN_KEY, token);
  changed();
}

function tenantList(id: string): HTMLDataListElement {
  return h('datalist', { id }, recentTenants().map((t) => h('option', { value: t })));
}

/** The top bar's tenant and token fields, each shown once the server asked for it or one is
 * set; a change applies at once (`reload` re-runs the page's queries). */
export function tenantControl(reload: () => void): HTMLElement {
  const tenantIn = h('input', {
    class: 'input tenant-input',
    'data-testid': 'tenant',
    'aria-label': 'Tenant',
    title: 'Tenant (X-Scope-OrgID) the UI asks for',
    placeholder: 'Tenant',
    list: 'weft-tenants',
    spellcheck: 'false',
    autocomplete: 'off',
  });
  const tokenIn = h('input', {
    class: 'input tenant-input',
    type: 'password',
    'data-testid': 'token',
    'aria-label': 'Bearer token',
    title: 'Bearer token the UI sends',
    placeholder: 'Bearer token',
    autocomplete: 'off',
  });
  const list = tenantList('weft-tenants');
  const tenantField = h('label', { class: 'tenant-field' }, h('span', { class: 'field-label' }, 'Tenant'), tenantIn, list);
  const tokenField = h('label', { class: 'tenant-field' }, h('span', { class: 'field-label' }, 'Token'), tokenIn);
  const el = h('form', { class: 'tenant-form', autocomplete: 'off' }, tenantField, tokenField);
  const sync = () => {
    if (document.activeElement !== tenantIn) tenantIn.value = tenant;
    if (document.activeElement !== tokenIn) tokenIn.value = token;
    tenantField.hidden = !tenant && !needs.has('tenant');
    tokenField.hidden = !token && !needs.has('token');
    el.hidden = tenantField.hidden && tokenField.hidden;
    list.replaceWith(tenantList('weft-tenants'));
  };
  const apply = () => {
    let any = false;
    if (tenantIn.value.trim() !== tenant) {
      setTenant(tenantIn.value);
      any = true;
    }
    if (tokenIn.value.trim() !== token) {
      setToken(tokenIn.value);
      any = true;
    }
    if (any) reload();
  };
  tenantIn.addEventListener('change', apply);
  tokenIn.addEventListener('change', apply);
  el.addEventListener('submit', (ev) => {
    ev.preventDefault();
    apply();
  });
  listeners.push(sync);
  sync();
  return el;
}

/** What a page shows in place of its data when the server refused it for want of a tenant or
 * a token: the server's message and the field to fill in. */
export function authPrompt(message: string, reload: () => void): HTMLElement {
  const need = authNeed(message);
  const input = h('input', {
    class: 'input',
    'data-testid': 'auth-prompt-input',
    'aria-label': need === 'token' ? 'Bearer token' : 'Tenant',
    placeholder: need === 'token' ? 'Bearer token' : 'Tenant (X-Scope-OrgID)',
    type: need === 'token' ? 'password' : 'text',
    list: need === 'tenant' ? 'weft-tenants-prompt' : null,
    spellcheck: 'false',
    autocomplete: 'off',
  });
  const title =
    need === 'token'
      ? token
        ? 'This weft did not accept the token'
        : 'This weft needs a bearer token'
      : tenant
        ? 'This weft did not accept the tenant'
        : 'This weft serves several tenants: which one?';
  const form = h(
    'form',
    { class: 'auth-prompt-form' },
    input,
    need === 'tenant' ? tenantList('weft-tenants-prompt') : null,
    h('button', { class: 'btn primary', type: 'submit' }, need === 'token' ? 'Use token' : 'Use tenant'),
  );
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    if (!input.value.trim()) return;
    if (need === 'token') setToken(input.value);
    else setTenant(input.value);
    reload();
  });
  queueMicrotask(() => input.focus());
  return h(
    'div',
    { class: 'callout auth-prompt', 'data-testid': 'auth-prompt', 'data-need': need, role: 'alert' },
    h('div', { class: 'callout-title' }, title),
    h(
      'p',
      { class: 'muted' },
      need === 'token'
        ? 'Every request needs a token listed in the server\'s auth_tokens; the token decides the tenant. '
        : 'Every request names its tenant (the X-Scope-OrgID header the collectors send too). ',
      'It is remembered in this browser. The server said: ',
      h('code', null, message),
    ),
    form,
  );
}
