// The UNKNOWN queue: GET /v1/keys?state=unknown page by page with the
// list's cursor, filtered by tenant (by the API), and by route and age
// (here: the route of each key's request label, the time it was marked
// UNKNOWN). The keys listed can be reconciled or resolved at once
// (bulk.js).
import { call, gatewayInfo } from './api.js';
import { h, show, loadError, age, time } from './dom.js';
import { bulkActions } from './bulk.js';

const LIMIT = 100; // keys a call asks for, and a page of the console shows at most
const MAX_CALLS = 20; // calls one page of the console makes at most when the filters skip keys

const AGES = [['0', 'any age'], ['60', 'older than 1 min'], ['600', 'older than 10 min'],
  ['3600', 'older than 1 h'], ['43200', 'older than 12 h']];

export function keyHref(tenant, key) {
  return `#/key?${new URLSearchParams({ tenant, key })}`;
}

function queueHref(tenant, route, minAge, after) {
  const q = new URLSearchParams();
  if (tenant) q.set('tenant', tenant);
  if (route) q.set('route', route);
  if (minAge) q.set('age', minAge);
  if (after) q.set('after', after);
  return `#/queue?${q}`;
}

// routeOf is the route a request label names ("POST /v1/orders/42
// route=orders" → "orders"), or '' when it names none.
export function routeOf(label) {
  const at = (label || '').indexOf(' route=');
  return at < 0 ? '' : label.slice(at + ' route='.length);
}

export function tenantCell(tenant) {
  return tenant === '' ? h('i', {}, '(none)') : h('span', { class: 'mono clip', title: tenant }, tenant);
}

// renderQueue draws the queue; flash, when given, is the result of the
// bulk action that led here, shown above the list.
export async function renderQueue(main, params, flash = null) {
  const tenant = params.get('tenant') || '';
  const route = params.get('route') || '';
  const minAge = Number(params.get('age') || 0);
  const after = params.get('after') || '';

  const tenantInput = h('input', { id: 'queue-tenant', value: tenant, placeholder: 'all tenants', autocomplete: 'off', spellcheck: 'false' });
  const routeInput = h('input', { id: 'queue-route', value: route, placeholder: 'every route', autocomplete: 'off', spellcheck: 'false' });
  const ageSelect = h('select', { id: 'queue-age' },
    AGES.map(([v, text]) => h('option', { value: v, selected: Number(v) === minAge }, text)));
  const filter = h('form', {
    class: 'filter', id: 'queue-filter',
    on: { submit: (ev) => { ev.preventDefault(); location.hash = queueHref(tenantInput.value.trim(), routeInput.value.trim(), Number(ageSelect.value), ''); } },
  }, h('label', {}, 'Tenant ', tenantInput), h('label', {}, 'Route ', routeInput), h('label', {}, 'Age ', ageSelect),
  h('button', { type: 'submit' }, 'Filter'),
  h('span', { class: 'hint' }, 'Tenant: blank for all, - for the empty tenant. Route: its name (or pattern).'));
  const heading = h('h1', {}, 'UNKNOWN queue');
  const intro = h('p', { class: 'hint' }, 'Requests that were sent and whose outcome is not known: a retry of them gets ',
    h('code', {}, '503 outcome_unknown'), ' until each is reconciled or resolved. Open a key to settle it.');
  show(main, heading, intro, filter, flash, h('p', {}, 'Loading…'));

  const rows = [];
  let cursor = after;
  let listed = 0;
  let calls = 0;
  do {
    const res = await call('v1/keys', { query: { state: 'unknown', tenant, limit: LIMIT, after: cursor } });
    if (!res.ok) {
      show(main, heading, intro, filter, flash, loadError(res, () => renderQueue(main, params)));
      return;
    }
    calls++;
    listed += res.data.keys.length;
    const now = Date.now();
    for (const k of res.data.keys) {
      const old = !minAge || (now - Date.parse(k.completed_at || k.acquired_at)) / 1000 >= minAge;
      if (old && (!route || routeOf(k.label) === route) && rows.length < LIMIT) rows.push(k);
    }
    cursor = res.data.next || '';
  } while (cursor && rows.length < LIMIT && calls < MAX_CALLS);
  const gw = await gatewayInfo();

  const table = h('table', { id: 'queue-table', class: 'keys' },
    h('thead', {}, h('tr', {}, ['Tenant', 'Key', 'Request', 'Sent', 'Marked UNKNOWN', 'Reason'].map((c) => h('th', {}, c)))),
    h('tbody', {}, rows.map((k) => h('tr', { 'data-key': k.key, 'data-tenant': k.tenant, 'data-fence': k.fence },
      h('td', {}, tenantCell(k.tenant)),
      h('td', {}, h('a', { href: keyHref(k.tenant, k.key), class: 'mono key-link clip', title: k.key }, k.key)),
      h('td', {}, h('span', { class: 'mono clip request', title: k.label || '' }, k.label || '')),
      h('td', { title: time(k.acquired_at) }, `${age(k.acquired_at)} ago`),
      h('td', { title: time(k.completed_at) }, `${age(k.completed_at)} ago`),
      h('td', { class: 'reason' }, k.reason || '')))));
  const skipped = listed - rows.length;
  const filters = [tenant ? `tenant ${tenant}` : 'every tenant', route ? `route ${route}` : 'every route',
    minAge ? AGES.find(([v]) => Number(v) === minAge)?.[1] || `older than ${minAge} s` : 'any age'].join(', ');
  const summary = h('p', { id: 'queue-summary' }, `${rows.length} UNKNOWN key${rows.length === 1 ? '' : 's'} here`,
    ` of ${filters}`, skipped ? ` (${skipped} others skipped by the filters)` : '',
    cursor ? '; more on the next page.' : '; no more.');
  const pager = h('div', { class: 'pager' },
    after ? h('a', { href: queueHref(tenant, route, minAge, ''), class: 'button quiet' }, 'First page') : null,
    after ? h('button', { type: 'button', class: 'quiet', on: { click: () => history.back() } }, 'Previous page') : null,
    cursor ? h('a', { href: queueHref(tenant, route, minAge, cursor), class: 'button', id: 'queue-next' }, 'Next page') : null);
  const bulk = bulkActions(rows, filters, gw.reconcile, (box) => renderQueue(main, params, box));
  show(main, heading, intro, filter, flash, summary, bulk, rows.length ? table : h('p', { class: 'empty' }, 'No UNKNOWN key here.'), pager);
}
