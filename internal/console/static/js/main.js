// The console's entry: the token form, the navigation and the views,
// routed by the URL's fragment (#/overview, #/queue?..., #/key?..., #/config), so
// the admin API serves one page and the views need no server routes.
import { call, token, setToken, forgetToken } from './api.js';
import { h, show, problemText } from './dom.js';
import { renderOverview } from './overview.js';
import { renderQueue, keyHref } from './queue.js';
import { renderKey } from './key.js';
import { renderConfig } from './config.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const login = document.getElementById('login');
const loginError = document.getElementById('login-error');

let refresh = null; // the overview's timer

function showLogin(message) {
  clearInterval(refresh);
  nav.hidden = true;
  main.hidden = true;
  login.hidden = false;
  loginError.hidden = !message;
  loginError.textContent = message || '';
  document.getElementById('token').focus();
}

function route() {
  clearInterval(refresh);
  if (token() === null) {
    showLogin('');
    return;
  }
  login.hidden = true;
  nav.hidden = false;
  main.hidden = false;
  const [path, query] = (location.hash.slice(1) || '/overview').split('?');
  const params = new URLSearchParams(query || '');
  const view = path.replace(/^\//, '');
  for (const a of nav.querySelectorAll('a[data-view]')) {
    if (a.dataset.view === view) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  // Each route draws into a fresh box: a slow answer for a view the
  // operator already left lands in a box no longer shown.
  const box = h('div', { class: 'view', 'data-view': view });
  show(main, box);
  switch (view) {
    case 'queue':
      renderQueue(box, params);
      break;
    case 'key':
      renderKey(box, params);
      break;
    case 'config':
      renderConfig(box);
      break;
    default:
      renderOverview(box);
      refresh = setInterval(() => {
        if (box.isConnected) renderOverview(box);
      }, 10000);
  }
}

document.getElementById('login-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const input = document.getElementById('token');
  setToken(input.value.trim());
  input.value = '';
  const res = await call('v1/stats');
  if (res.status === 401) return; // the unauthorized handler shows why
  if (!res.ok) {
    forgetToken();
    showLogin(problemText(res));
    return;
  }
  route();
});

window.addEventListener('idem:unauthorized', () => {
  forgetToken();
  showLogin('The admin API refused the token (401): paste it again.');
});

document.getElementById('forget').addEventListener('click', () => {
  forgetToken();
  showLogin('');
});

document.getElementById('goto').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const tenant = document.getElementById('goto-tenant').value.trim();
  const key = document.getElementById('goto-key').value;
  location.hash = keyHref(tenant === '-' ? '' : tenant, key);
});

window.addEventListener('hashchange', route);
route();
