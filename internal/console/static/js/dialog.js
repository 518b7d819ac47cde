// The confirmation every action asks for: a modal <dialog> that says
// what will be sent, with a reason for the audit, Cancel and a button
// named for the action.
import { show } from './dom.js';

const dialog = () => document.getElementById('confirm');

// confirmAction opens the dialog and resolves with the reason the
// operator typed ('' for none) when they press the action's button, null
// on Cancel or Escape.
export function confirmAction(title, body, actionLabel) {
  const d = dialog();
  document.getElementById('confirm-title').textContent = title;
  show(document.getElementById('confirm-body'), body);
  const reason = document.getElementById('confirm-reason');
  reason.value = '';
  const ok = document.getElementById('confirm-ok');
  const cancel = document.getElementById('confirm-cancel');
  ok.textContent = actionLabel;
  return new Promise((resolve) => {
    const done = (answer) => {
      ok.removeEventListener('click', onOK);
      cancel.removeEventListener('click', onCancel);
      d.removeEventListener('close', onClose);
      if (d.open) d.close();
      resolve(answer);
    };
    const onOK = () => done(reason.value.trim());
    const onCancel = () => done(null);
    const onClose = () => done(null); // Escape
    ok.addEventListener('click', onOK);
    cancel.addEventListener('click', onCancel);
    d.addEventListener('close', onClose);
    d.showModal();
    cancel.focus();
  });
}
