// Bulk actions over the keys the queue lists: reconcile each, or resolve
// each as not executed, after one confirmation that states the count.
// Each key goes through the admin API's own endpoint for one key, as the
// key's page sends it: the API's access rules hold for every one, each is
// audited as one admin change with the reason typed once, and a
// resolution names the fence the listing showed, so a key that changed
// since (taken again, settled by another) is refused, not overwritten.
// The keys are those of one page of the queue: at most its 100.
import { call, keyPath } from './api.js';
import { h, problemText, trouble } from './dom.js';
import { confirmAction } from './dialog.js';

const NAMED = 10; // keys the confirmation names; the rest are counted

const ACTIONS = {
  reconcile: {
    button: 'Reconcile these', title: (n) => `Reconcile ${n} UNKNOWN key${n === 1 ? '' : 's'}?`, label: (n) => `Reconcile ${n}`,
    what: 'The gateway asks the upstream\'s lookup (--reconcile-url) about each, one after the other, and records each answer.',
    send: (k, note) => call(keyPath(k.tenant, k.key, '/reconcile'), { method: 'POST', body: note }),
    settled: (res) => res.data.verdict === 'completed' || res.data.verdict === 'not_executed',
  },
  notExecuted: {
    button: 'Resolve these as not executed', title: (n) => `Resolve ${n} UNKNOWN key${n === 1 ? '' : 's'} as not executed?`,
    label: (n) => `Resolve ${n} as not executed`,
    what: 'Say so only if none of these requests took effect, nor can still: each key is released, and the next retry of each runs its request. One that did take effect runs twice.',
    send: (k, note) => call(keyPath(k.tenant, k.key, '/resolve'), { method: 'POST', body: { fence: k.fence, outcome: 'not_executed', ...note } }),
    settled: () => true,
  },
};

// runBulk confirms the action over keys, then sends it key by key and
// resolves with the box that says how it went (null when cancelled). It
// stops at the first call that got no answer, or that found the store
// unavailable: the rest would fail alike.
async function runBulk(kind, keys, filters) {
  const a = ACTIONS[kind];
  const n = keys.length;
  const named = keys.slice(0, NAMED).map((k) => h('li', { class: 'mono' }, `${k.tenant === '' ? '(none)' : k.tenant} / ${k.key}`));
  const note = await confirmAction(a.title(n), [
    h('p', { id: 'bulk-count' }, h('b', {}, `${n} key${n === 1 ? '' : 's'}`), ` listed in the queue (${filters}).`),
    h('ul', { class: 'bulk-keys' }, named, n > NAMED ? h('li', {}, `… and ${n - NAMED} more`) : null),
    h('p', { class: kind === 'notExecuted' ? 'warn' : '' }, a.what),
    h('p', { class: 'hint' }, 'Each is one change in the gateway\'s audit, with the reason below.')], a.label(n));
  if (note === null) return null;
  const body = note ? { reason: note } : {};
  let settled = 0;
  const failed = [];
  let stopped = '';
  for (const k of keys) {
    const res = await a.send(k, body);
    if (res.ok && a.settled(res)) {
      settled++;
      continue;
    }
    const why = res.ok ? `not settled: ${res.data.detail || res.data.verdict}` : problemText(res);
    failed.push(h('li', {}, h('span', { class: 'mono' }, k.key), `: ${why}`));
    if (!res.ok && (trouble(res) || res.status === 401)) {
      stopped = `Stopped after ${settled + failed.length} of ${n}: ${why}. The keys not tried are unchanged.`;
      break;
    }
  }
  const ok = failed.length === 0;
  return h('div', { id: 'bulk-result', class: ok ? 'result ok' : 'result failed', role: 'status', 'data-settled': settled, 'data-failed': failed.length },
    h('b', {}, `${settled} of ${n} settled${failed.length ? `, ${failed.length} not` : ''}.`),
    stopped ? h('p', {}, stopped) : null, failed.length ? h('ul', {}, failed) : null);
}

// bulkActions is the bar of bulk buttons for the keys listed; done is
// called with the result box once an action ran.
export function bulkActions(keys, filters, reconcile, done) {
  if (keys.length === 0) return null;
  const button = (kind, id, extra) => h('button', {
    type: 'button', id, ...extra,
    on: { click: async () => { const box = await runBulk(kind, keys, filters); if (box) done(box); } },
  }, `${ACTIONS[kind].button} (${keys.length})…`);
  return h('div', { class: 'bulk', id: 'bulk' },
    button('reconcile', 'bulk-reconcile', { disabled: !reconcile, title: reconcile ? null : 'no --reconcile-url' }),
    button('notExecuted', 'bulk-not-executed', { class: 'danger' }),
    h('span', { class: 'hint' }, 'Over every key listed here, with one confirmation.'));
}
