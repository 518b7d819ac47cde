// What an operator can do to a key: reconcile it now, resolve it as
// completed or as not executed, delete it. Each asks for confirmation,
// saying what will be sent, and shows the admin API's answer.
import { call, keyPath } from './api.js';
import { h, problemText } from './dom.js';
import { confirmAction } from './dialog.js';

const PREVIEW = 300; // characters of a body the confirmation shows

function facts(pairs) {
  return h('dl', { class: 'facts' }, pairs.filter(Boolean).flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}

// outcome is the box that says how an action went.
function outcome(ok, title, detail) {
  return h('div', { id: 'result', class: ok ? 'result ok' : 'result failed', role: 'status' },
    h('b', {}, title), detail ? h('p', {}, detail) : null);
}

// parseHeaders reads "Name: value" lines into {Name: [values]}.
function parseHeaders(text) {
  const out = {};
  for (const [i, line] of text.split('\n').entries()) {
    if (!line.trim()) continue;
    const at = line.indexOf(':');
    if (at < 1) throw new Error(`header line ${i + 1} is not "Name: value"`);
    const name = line.slice(0, at).trim();
    (out[name] = out[name] || []).push(line.slice(at + 1).trim());
  }
  return out;
}

// reconciled says what a reconciliation did: settled (green), or not
// (red): the lookup failed, with the status it answered, or was not asked.
function reconciled(res) {
  const v = res.data;
  if (v.verdict === 'completed' || v.verdict === 'not_executed') return `Verdict: ${v.verdict}. ${v.detail}`;
  const title = v.lookup_status
    ? `Not settled: the lookup answered ${v.lookup_status}; the key stays UNKNOWN`
    : 'Not settled: the key stays UNKNOWN';
  const box = outcome(false, title, v.detail);
  box.dataset.lookupStatus = String(v.lookup_status || 0);
  return box;
}

export function actions(rec, gw, reload) {
  const who = [['Tenant', rec.tenant === '' ? '(none)' : rec.tenant], ['Key', rec.key], ['Fence', String(rec.fence)]];
  const path = (suffix) => keyPath(rec.tenant, rec.key, suffix);

  // run confirms an action, sends it with the operator's reason and shows
  // the answer: said(res) says how a success went, or returns a failure
  // box (a reconciliation that settled nothing).
  const run = async (title, body, label, send, said) => {
    const reason = await confirmAction(title, body, label);
    if (reason === null) return;
    // The answer of an earlier action goes while this one runs: what is
    // shown is never a stale result.
    document.getElementById('result')?.remove();
    const res = await send(reason ? { reason } : {});
    if (!res.ok) {
      reload(failure(res));
      return;
    }
    const shown = said(res);
    reload(typeof shown === 'string' ? outcome(true, shown) : shown);
  };
  const failure = (res) => {
    if (res.status === 0) {
      return outcome(false, 'No answer: the change may or may not have been made',
        `${problemText(res)}. The key's state below is read again: check it before trying again.`);
    }
    const box = outcome(false, 'Refused: nothing was changed', problemText(res));
    const code = res.problem && res.problem.code;
    if (res.status === 409 && (code === 'key_in_flight' || code === 'key_unknown')) {
      box.append(h('button', { type: 'button', class: 'danger', id: 'force-delete', on: { click: forceDelete } }, 'Delete anyway'));
    }
    return box;
  };
  const forceDelete = () => run('Delete this key anyway?',
    [facts([...who, ['State', rec.state]]),
      h('p', { class: 'warn' }, 'Its request may have run (or may be running). The next retry runs it again: a second execution unless the upstream deduplicates it.')],
    'Delete anyway', (note) => call(path(''), { method: 'DELETE', query: { force: 'true' }, body: note }), () => 'Deleted (forced).');

  const left = []; // reconcile, not executed, delete; the form of a completed resolution on the right
  let right = null;
  if (rec.state === 'UNKNOWN') {
    left.push(h('div', { class: 'action' },
      h('button', {
        type: 'button', id: 'action-reconcile', disabled: !gw.reconcile,
        on: {
          click: () => run('Reconcile now?', [facts(who), h('p', {}, 'The gateway asks the upstream\'s lookup (--reconcile-url) about this attempt and records its answer.')],
            'Ask the lookup', (note) => call(path('/reconcile'), { method: 'POST', body: note }), reconciled),
        },
      }, 'Reconcile now'),
      h('span', { class: 'hint' }, gw.reconcile ? ' ask the upstream what became of it' : ' no --reconcile-url: resolve it by hand')));

    const status = h('input', { id: 'resolve-status', type: 'number', min: 200, max: 599, value: 200, required: true });
    const headers = h('textarea', { id: 'resolve-headers', rows: 3, spellcheck: 'false', placeholder: 'Content-Type: application/json' });
    const body = h('textarea', { id: 'resolve-body', rows: 5, spellcheck: 'false', placeholder: 'the response the upstream gave' });
    const formError = h('p', { class: 'problem', role: 'alert', hidden: true });
    const completed = h('form', {
      id: 'resolve-completed', class: 'action',
      on: {
        submit: (ev) => {
          ev.preventDefault();
          let header;
          try {
            header = parseHeaders(headers.value);
          } catch (e) {
            formError.textContent = e.message;
            formError.hidden = false;
            return;
          }
          formError.hidden = true;
          const code = Number(status.value);
          const text = body.value;
          run('Resolve as completed?', [facts([...who, ['Status', String(code)],
            ['Headers', Object.entries(header).map(([n, vs]) => vs.map((v) => `${n}: ${v}`).join('\n')).join('\n') || '(none)'],
            ['Body', text.length > PREVIEW ? `${text.slice(0, PREVIEW)}… (${text.length} characters)` : text || '(empty)']]),
          h('p', {}, 'Say so only if the request took effect: every retry then gets this response, and the request never runs again.')],
          'Resolve as completed',
          (note) => call(path('/resolve'), { method: 'POST', body: { fence: rec.fence, outcome: 'completed', status: code, header, body: text, ...note } }),
          () => `Resolved as completed: retries of this key now get status ${code} and this body.`);
        },
      },
    }, h('h3', {}, 'Resolve as completed'), h('p', { class: 'hint' }, 'The request took effect: record the response to replay.'),
    h('label', {}, 'Status ', status), h('label', {}, 'Headers, one "Name: value" a line', headers),
    h('label', {}, 'Body', body), formError, h('button', { type: 'submit', id: 'action-completed' }, 'Resolve as completed…'));

    const notExecuted = h('div', { class: 'action' }, h('h3', {}, 'Resolve as not executed'),
      h('p', { class: 'hint' }, 'The request provably did not take effect (and cannot still): release the key so the next retry runs it.'),
      h('button', {
        type: 'button', id: 'action-not-executed',
        on: {
          click: () => run('Resolve as not executed?', [facts(who),
            h('p', { class: 'warn' }, 'The next retry runs the request. If it did take effect, it runs twice.')],
          'Resolve as not executed', (note) => call(path('/resolve'), { method: 'POST', body: { fence: rec.fence, outcome: 'not_executed', ...note } }),
          () => 'Resolved as not executed: the key is released; the next retry runs the request.'),
        },
      }, 'Resolve as not executed…'));
    left.push(notExecuted);
    right = completed;
  }
  left.push(h('div', { class: 'action' }, h('h3', {}, 'Delete'),
    h('p', { class: 'hint' }, 'Forget the record: the next request with this key runs as new.'),
    h('button', {
      type: 'button', id: 'action-delete', class: 'danger',
      on: {
        click: () => run('Delete this key?', [facts([...who, ['State', rec.state]]),
          h('p', { class: 'warn' }, 'The next request with this key runs as new.')],
        'Delete', (note) => call(path(''), { method: 'DELETE', body: note }), () => 'Deleted: the key has no record now.'),
      },
    }, 'Delete…')));
  return h('section', { id: 'actions' }, h('h2', {}, 'Actions'), h('div', { class: 'column' }, left), right);
}
