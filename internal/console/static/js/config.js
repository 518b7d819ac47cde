// The configuration view: GET /v1/config, the effective configuration the
// gateway runs (what `idem serve --check-config=json` prints): each
// setting with its value and where it came from, secrets masked, and each
// route's policy.
import { call } from './api.js';
import { h, show, loadError } from './dom.js';

// from says where a value came from: "env IDEM_LEASE", "file
// /etc/idem/idem.yaml:12", "default"; with the file's line it overrode.
function from(o) {
  const where = o.origin ? `${o.source} ${o.origin}` : o.source;
  return o.overrides ? `${where} (over file ${o.overrides})` : where;
}

// text writes a route option's value: a string as itself, anything else
// as JSON.
function text(v) {
  return typeof v === 'string' ? v : JSON.stringify(v);
}

function settingsTable(settings) {
  const names = Object.keys(settings).sort();
  return h('table', { id: 'config-settings', class: 'keys' },
    h('thead', {}, h('tr', {}, ['Setting', 'Value', 'From', 'Reload'].map((c) => h('th', {}, c)))),
    h('tbody', {}, names.map((name) => {
      const s = settings[name];
      return h('tr', { 'data-setting': name, 'data-source': s.source },
        h('td', { class: 'mono' }, name),
        h('td', { class: 'mono' }, s.value),
        h('td', {}, from(s)),
        h('td', {}, s.reload ? 'yes' : 'restart'));
    })));
}

function routeSection(r) {
  const title = r.match === '' ? 'Requests no route matches'
    : `Route ${r.match}${r.name ? ` (${r.name})` : ''}${r.source ? `, defined at ${r.source}` : ''}`;
  const options = Object.keys(r.policy).sort();
  return h('section', { class: 'config-route', 'data-match': r.match },
    h('h2', {}, title),
    h('table', { class: 'keys' },
      h('thead', {}, h('tr', {}, ['Option', 'Value', 'From'].map((c) => h('th', {}, c)))),
      h('tbody', {}, options.map((name) => h('tr', { 'data-option': name },
        h('td', { class: 'mono' }, name),
        h('td', { class: 'mono' }, text(r.policy[name].value)),
        h('td', {}, from(r.policy[name])))))));
}

export async function renderConfig(main) {
  const heading = h('h1', {}, 'Configuration');
  show(main, heading, h('p', {}, 'Loading…'));
  const res = await call('v1/config');
  if (!res.ok) {
    show(main, heading, loadError(res, () => renderConfig(main)));
    return;
  }
  const c = res.data;
  const about = h('p', { class: 'hint', id: 'config-about' },
    `idem ${c.version}; `, c.config ? `config file ${c.config}` : 'no config file',
    '. What runs now (since the start or the last reload), as ', h('code', {}, 'idem serve --check-config'),
    ' prints it; secrets are masked. "restart": a reload does not change it.');
  const warnings = (c.warnings || []).map((w) => h('p', { class: 'problem config-warning', role: 'alert' }, w));
  show(main, heading, about, warnings, settingsTable(c.settings || {}), (c.routes || []).map(routeSection));
}
