// The UNKNOWN queue: GET /v1/keys?state=unknown page by page with the
// list's cursor, filtered by tenant (by the API) and by age (here, on the
// time each key was marked UNKNOWN).
import { call } from './api.js';
import { h, show, loadError, age, time } from './dom.js';

const LIMIT = 100; // keys a call asks for
const MAX_CALLS = 20; // calls one page of the console makes at most when the age filter skips keys

const AGES = [['0', 'any age'], ['60', 'older than 1 min'], ['600', 'older than 10 min'],
  ['3600', 'older than 1 h'], ['43200', 'older than 12 h']];

export function keyHref(tenant, key) {
  return `#/key?${new URLSearchParams({ tenant, key })}`;
}

function queueHref(tenant, minAge, after) {
  const q = new URLSearchParams();
  if (tenant) q.set('tenant', tenant);
  if (minAge) q.set('age', minAge);
  if (after) q.set('after', after);
  return `#/queue?${q}`;
}

export function tenantCell(tenant) {
  return tenant === '' ? h('i', {}, '(none)') : h('span', { class: 'mono clip', title: tenant }, tenant);
}

export async function renderQueue(main, params) {
  const tenant = params.get('tenant') || '';
  const minAge = Number(params.get('age') || 0);
  const after = params.get('after') || '';

  const tenantInput = h('input', { id: 'queue-tenant', value: tenant, placeholder: 'all tenants', autocomplete: 'off', spellcheck: 'false' });
  const ageSelect = h('select', { id: 'queue-age' },
    AGES.map(([v, text]) => h('option', { value: v, selected: Number(v) === minAge }, text)));
  const filter = h('form', {
    class: 'filter', id: 'queue-filter',
    on: { submit: (ev) => { ev.preventDefault(); location.hash = queueHref(tenantInput.value.trim(), Number(ageSelect.value), ''); } },
  }, h('label', {}, 'Tenant ', tenantInput), h('label', {}, 'Age ', ageSelect), h('button', { type: 'submit' }, 'Filter'),
  h('span', { class: 'hint' }, 'Tenant: blank for all, - for the empty tenant.'));
  const heading = h('h1', {}, 'UNKNOWN queue');
  const intro = h('p', { class: 'hint' }, 'Requests that were sent and whose outcome is not known: a retry of them gets ',
    h('code', {}, '503 outcome_unknown'), ' until each is reconciled or resolved. Open a key to settle it.');
  show(main, heading, intro, filter, h('p', {}, 'Loading…'));

  const rows = [];
  let cursor = after;
  let listed = 0;
  let calls = 0;
  do {
    const res = await call('v1/keys', { query: { state: 'unknown', tenant, limit: LIMIT, after: cursor } });
    if (!res.ok) {
      show(main, heading, intro, filter, loadError(res, () => renderQueue(main, params)));
      return;
    }
    calls++;
    listed += res.data.keys.length;
    const now = Date.now();
    for (const k of res.data.keys) {
      if (!minAge || (now - Date.parse(k.completed_at || k.acquired_at)) / 1000 >= minAge) rows.push(k);
    }
    cursor = res.data.next || '';
  } while (cursor && rows.length < LIMIT && calls < MAX_CALLS);

  const table = h('table', { id: 'queue-table', class: 'keys' },
    h('thead', {}, h('tr', {}, ['Tenant', 'Key', 'Fence', 'Marked UNKNOWN', 'Reason'].map((c) => h('th', {}, c)))),
    h('tbody', {}, rows.map((k) => h('tr', { 'data-key': k.key, 'data-tenant': k.tenant },
      h('td', {}, tenantCell(k.tenant)),
      h('td', {}, h('a', { href: keyHref(k.tenant, k.key), class: 'mono key-link clip', title: k.key }, k.key)),
      h('td', { class: 'num' }, String(k.fence)),
      h('td', { title: time(k.completed_at) }, `${age(k.completed_at)} ago`),
      h('td', { class: 'reason' }, k.reason || '')))));
  const skipped = listed - rows.length;
  const summary = h('p', { id: 'queue-summary' }, `${rows.length} UNKNOWN key${rows.length === 1 ? '' : 's'} here`,
    tenant ? ` of tenant ${tenant}` : ' of every tenant', skipped ? ` (${skipped} younger ones skipped)` : '',
    cursor ? '; more on the next page.' : '; no more.');
  const pager = h('div', { class: 'pager' },
    after ? h('a', { href: queueHref(tenant, minAge, ''), class: 'button quiet' }, 'First page') : null,
    after ? h('button', { type: 'button', class: 'quiet', on: { click: () => history.back() } }, 'Previous page') : null,
    cursor ? h('a', { href: queueHref(tenant, minAge, cursor), class: 'button', id: 'queue-next' }, 'Next page') : null);
  show(main, heading, intro, filter, summary, rows.length ? table : h('p', { class: 'empty' }, 'No UNKNOWN key here.'), pager);
}
