// The overview: the gateway's last hour from GET /v1/stats, a ring of
// samples of its own counters. Counters count since the gateway started;
// the charts show what each interval added.
import { call } from './api.js';
import { h, show, loadError, duration } from './dom.js';
import { lineChart } from './charts.js';

// COLOR gives each label one color (.s0 ... .s7) in every chart.
const COLOR = {
  executed: 0, replayed: 1, mismatch: 2, conflict: 3, released: 4, marked_unknown: 5, unknown: 6,
  completed: 2, not_executed: 4, error: 3,
};

// deltas returns, per label, the points [at, increase over the interval
// before] and the total increase over the window.
function deltas(samples, field, labels) {
  return labels.map((name) => {
    const points = [];
    let total = 0;
    for (let i = 1; i < samples.length; i++) {
      const d = Math.max(0, (samples[i][field][name] || 0) - (samples[i - 1][field][name] || 0));
      points.push([Date.parse(samples[i].at), d]);
      total += d;
    }
    return { name, points, total, color: COLOR[name] ?? 7 };
  });
}

// labelsOf lists the labels of a counter seen in the samples, those that
// moved in the window first, largest first.
function labelsOf(samples, field) {
  const first = samples[0][field];
  const last = samples[samples.length - 1][field];
  return Object.keys(last)
    .map((name) => [name, (last[name] || 0) - (first[name] || 0)])
    .filter(([, moved]) => moved > 0)
    .sort((a, b) => b[1] - a[1])
    .map(([name]) => name);
}

function tile(label, value, note) {
  return h('div', { class: 'tile' }, h('span', { class: 'label' }, label), h('b', { 'data-tile': label }, value),
    note ? h('span', { class: 'note' }, note) : null);
}

export async function renderOverview(main) {
  const res = await call('v1/stats');
  if (!res.ok) {
    show(main, h('h1', {}, 'Overview'), loadError(res, () => renderOverview(main)));
    return;
  }
  const st = res.data;
  const samples = st.samples || [];
  // The admin API answered, its store did not: requests with a key get
  // 503 store_unavailable, and no key can be read or settled.
  const heading = [h('h1', {}, 'Overview'), st.store_unavailable ? h('div', { class: 'load-error', id: 'store-down', role: 'alert', 'data-trouble': 'store' },
    h('p', { class: 'problem' }, h('b', {}, 'The store is unavailable. '), `The admin API answers; its store does not: ${st.store_unavailable}. `,
      'Requests with a key get 503 store_unavailable; keys cannot be read or settled until it is back.')) : null];
  const about = h('p', { class: 'hint' },
    `Upstream ${st.upstream}. A sample of the gateway's counters every ${duration(st.interval_ms / 1000)}; `,
    `${samples.length} kept (at most 360). Reconcile lookup: ${st.reconcile ? 'configured' : 'none (resolve by hand)'}.`);
  if (samples.length === 0) {
    show(main, heading, about, h('p', {}, 'No sample yet: the first comes when the gateway starts serving.'));
    return;
  }
  const last = samples[samples.length - 1];
  const first = samples[0];
  const from = Date.parse(first.at);
  const to = Date.parse(last.at);
  const moved = (field, name) => (last[field][name] || 0) - (first[field][name] || 0);
  const all = Object.keys(last.requests).reduce((n, o) => n + moved('requests', o), 0);
  const replayed = moved('requests', 'replayed');
  const tiles = h('div', { class: 'tiles' },
    tile('Requests', String(all), `in the last ${duration((to - from) / 1000)}`),
    tile('Replayed', String(replayed), all ? `${Math.round((100 * replayed) / all)}% of requests` : ''),
    tile('Conflicts', String(moved('requests', 'conflict') + moved('requests', 'mismatch')), '409 in flight, 422 mismatch'),
    tile('UNKNOWN keys', String(last.unknown_keys), last.unknown_keys ? `oldest ${duration(last.unknown_oldest_seconds)}` : 'none'),
    tile('Marked UNKNOWN', String(moved('requests', 'marked_unknown')), 'cut, timed out or lost'));

  const outcomes = labelsOf(samples, 'requests').slice(0, 8);
  const charts = h('div', { class: 'charts' },
    lineChart('Requests by outcome, per interval', deltas(samples, 'requests', outcomes), from, to),
    lineChart('Replays and conflicts, per interval', deltas(samples, 'requests', ['replayed', 'conflict', 'mismatch']), from, to),
    lineChart('UNKNOWN keys', [
      { name: 'UNKNOWN now', points: samples.map((x) => [Date.parse(x.at), x.unknown_keys]) },
    ], from, to),
    lineChart('Reconciliations by result, per interval',
      deltas(samples, 'reconciliations', ['completed', 'not_executed', 'unknown', 'error']), from, to));
  show(main, heading, about, tiles, charts);
}
