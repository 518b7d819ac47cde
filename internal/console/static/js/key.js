// A key's page: its record (GET /v1/keys/{tenant}/{key}), the stored
// response of a COMPLETED key (GET .../result), and the actions.
import { call, keyPath, tenantParam, gatewayInfo } from './api.js';
import { h, show, problemText, loadError, age, time, duration } from './dom.js';
import { tenantCell } from './queue.js';
import { actions } from './actions.js';

const SHOWN_BODY = 64 << 10; // characters of a body the page shows

function row(label, ...value) {
  return h('tr', {}, h('th', { scope: 'row' }, label), h('td', {}, ...value));
}

function recordTable(rec, gw) {
  const marked = rec.state === 'UNKNOWN' ? 'Marked UNKNOWN' : 'Completed';
  return h('table', { class: 'record', id: 'record' },
    row('Tenant', tenantCell(rec.tenant)),
    row('Key', h('span', { class: 'mono', id: 'record-key' }, rec.key)),
    row('State', h('span', { class: `state ${rec.state.toLowerCase()}`, id: 'record-state', 'data-state': rec.state }, rec.state)),
    row('Fence', h('span', { id: 'record-fence' }, String(rec.fence)),
      h('span', { class: 'hint' }, ' the fencing token of the attempt that made this record (higher on every attempt; the store does not count attempts)')),
    rec.reason ? row(rec.state === 'UNKNOWN' ? 'Reason' : 'Was UNKNOWN for', h('span', { class: 'reason', id: 'record-reason' }, rec.reason)) : null,
    row('Request', rec.label ? h('span', { class: 'mono', id: 'record-label' }, rec.label)
      : h('span', { class: 'hint', id: 'record-label' }, '(not recorded: a key taken before the gateway labelled them, or by a library)')),
    row('Sent to', h('span', { class: 'mono' }, gw.upstream), h('span', { class: 'hint' }, ' (this gateway\'s upstream)')),
    row('Sent', h('span', { id: 'record-sent' }, time(rec.acquired_at)),
      h('span', { class: 'hint' }, ` ${age(rec.acquired_at)} ago, when the key was taken, by the store's clock`)),
    rec.completed_at ? row(marked, time(rec.completed_at), h('span', { class: 'hint' }, ` ${age(rec.completed_at)} ago`)) : null,
    row(rec.state === 'PROCESSING' ? 'Lease ends in' : 'Forgotten in', duration(rec.ttl_ms / 1000),
      rec.state === 'UNKNOWN' ? h('span', { class: 'hint' }, ' then a retry runs the request again: settle it before') : null),
    row('Fingerprint', h('span', { class: 'mono clip', title: rec.fingerprint }, rec.fingerprint)));
}

async function responseSection(tenant, key) {
  const res = await call(keyPath(tenant, key, '/result'));
  if (!res.ok) return h('p', { class: 'problem' }, problemText(res));
  const r = res.data;
  let body;
  if (r.body !== undefined) {
    body = r.body.length > SHOWN_BODY ? `${r.body.slice(0, SHOWN_BODY)}\n… (${r.body_bytes} bytes in all)` : r.body;
  } else if (r.body_base64 !== undefined) {
    body = `(not text: ${r.body_bytes} bytes, base64)\n${r.body_base64.slice(0, SHOWN_BODY)}`;
  } else {
    body = '(empty)';
  }
  const headers = Object.entries(r.header || {}).flatMap(([name, values]) => values.map((v) => h('tr', {},
    h('th', { scope: 'row', class: 'mono' }, name), h('td', { class: 'mono' }, v))));
  return h('section', { id: 'response' }, h('h2', {}, 'Stored response'),
    h('p', {}, 'Replayed to every retry with this key: status ', h('b', { id: 'response-status' }, String(r.status)), '.'),
    headers.length ? h('table', { class: 'headers' }, h('tbody', {}, headers)) : h('p', { class: 'hint' }, 'No stored headers.'),
    h('pre', { id: 'response-body', class: 'body' }, body));
}

// auditSection lists the key's admin changes this gateway kept (GET
// /v1/audit), newest first.
async function auditSection(tenant, key) {
  const res = await call('v1/audit', { query: { tenant: tenantParam(tenant), key } });
  if (!res.ok) return h('p', { class: 'problem' }, `Admin changes: ${problemText(res)}`);
  const records = res.data.records;
  const rows = records.map((r) => h('tr', { 'data-outcome': r.outcome },
    h('td', { title: time(r.time) }, `${age(r.time)} ago`), h('td', { class: 'mono' }, r.actor),
    h('td', {}, r.resolution ? `${r.action} ${r.resolution}` : r.action),
    h('td', {}, r.code ? `${r.outcome} (${r.code})` : r.outcome),
    h('td', {}, `${r.state_before} → ${r.state_after}`), h('td', { class: 'reason' }, r.reason || '')));
  return h('section', { id: 'audit' }, h('h2', {}, 'Admin changes'),
    h('p', { class: 'hint' }, 'Those this gateway kept since it started (its last 1,000, of every key); its log has every one.'),
    records.length ? h('table', { class: 'keys', id: 'audit-table' },
      h('thead', {}, h('tr', {}, ['When', 'Who', 'Action', 'Outcome', 'State', 'Reason'].map((c) => h('th', {}, c)))),
      h('tbody', {}, rows)) : h('p', { class: 'empty' }, 'None here.'));
}

// renderKey draws the key's page; flash, when given, is the result of
// the action that led here, shown above the record.
export async function renderKey(main, params, flash = null) {
  const tenant = params.get('tenant') || '';
  const key = params.get('key') || '';
  const heading = h('h1', {}, 'Key ', h('span', { class: 'mono' }, key));
  const back = h('p', {}, h('a', { href: '#/queue' }, '← UNKNOWN queue'));
  show(main, back, heading, flash, h('p', { id: 'loading' }, 'Loading…'));
  const [res, gw] = await Promise.all([call(keyPath(tenant, key)), gatewayInfo()]);
  const reload = (result) => renderKey(main, params, result);
  if (res.status === 404) {
    show(main, back, heading, flash, h('p', { id: 'no-record' }, 'No record for this tenant and key: never seen, ',
      'released (a retry runs it), deleted, or past its retention.'));
    return;
  }
  if (!res.ok) {
    show(main, back, heading, flash, loadError(res, () => renderKey(main, params, flash)));
    return;
  }
  const rec = res.data;
  const parts = [back, heading, flash, recordTable(rec, gw)];
  if (rec.state === 'COMPLETED') parts.push(await responseSection(tenant, key));
  parts.push(actions(rec, gw, reload), await auditSection(tenant, key));
  show(main, parts);
}
