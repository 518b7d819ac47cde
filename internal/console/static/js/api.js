// Calls to the admin API, with the token the operator pasted. The token
// lives in this tab's sessionStorage only and goes out in the
// Authorization header of fetch calls to this origin, never in a URL or a
// cookie.

const TOKEN = 'idem.adminToken';

export function token() {
  return sessionStorage.getItem(TOKEN);
}

export function setToken(value) {
  sessionStorage.setItem(TOKEN, value);
}

export function forgetToken() {
  sessionStorage.removeItem(TOKEN);
}

// The admin API is one level above the console (/ui/ → /v1/...), so a
// proxy that serves it under a prefix works too.
const base = new URL('../', document.baseURI);

// seg writes a path segment: everything but unreserved characters
// percent-encoded, dots too, so a key of "." or ".." stays a segment.
export function seg(value) {
  return encodeURIComponent(value).replace(/\./g, '%2E');
}

// tenantParam writes a tenant as the admin API names it in a path or a
// ?tenant=: "-" is the empty tenant, and a tenant made of dashes gets
// one more.
export function tenantParam(tenant) {
  return /^-*$/.test(tenant) ? `-${tenant}` : tenant;
}

// tenantSeg writes a tenant's path segment.
export function tenantSeg(tenant) {
  return seg(tenantParam(tenant));
}

// keyPath is the admin path of a key, with a suffix such as "/resolve".
export function keyPath(tenant, key, suffix = '') {
  return `v1/keys/${tenantSeg(tenant)}/${seg(key)}${suffix}`;
}

// How long a call waits for the admin API's answer: a read, and a change
// (a reconciliation waits for the upstream's lookup). Past it the call
// ends with status 0, so no view waits for ever on an API that stopped
// answering.
export const READ_TIMEOUT_MS = 10000;
export const CHANGE_TIMEOUT_MS = 30000;

// call sends one request and resolves, never rejects, with
// {ok, status, data, problem, error}; status 0 when no answer came (the
// network, or no answer within the timeout). A 401 fires
// "idem:unauthorized". Every change (any method but GET) is JSON, with
// body, or {} when there is none: the admin API refuses any other, which
// is what a page of another site could send.
export async function call(path, { method = 'GET', query, body } = {}) {
  const url = new URL(path, base);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== '') url.searchParams.set(k, v);
  }
  const headers = { Accept: 'application/json' };
  const t = token();
  if (t) headers.Authorization = `Bearer ${t}`;
  const change = method !== 'GET';
  if (change) headers['Content-Type'] = 'application/json';
  const timeout = change ? CHANGE_TIMEOUT_MS : READ_TIMEOUT_MS;
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), timeout);
  try {
    let resp;
    try {
      resp = await fetch(url, {
        method, headers, body: change ? JSON.stringify(body ?? {}) : undefined,
        credentials: 'omit', cache: 'no-store', redirect: 'error', signal: abort.signal,
      });
    } catch (e) {
      const error = abort.signal.aborted ? `no answer within ${timeout / 1000} s` : String(e && e.message ? e.message : e);
      return { ok: false, status: 0, error };
    }
    const out = { ok: resp.ok, status: resp.status };
    const type = resp.headers.get('Content-Type') || '';
    try {
      if (type.includes('json')) {
        const data = await resp.json();
        if (resp.ok) out.data = data; else out.problem = data;
      } else if (!resp.ok) {
        out.problem = { title: (await resp.text()).slice(0, 300) };
      }
    } catch (e) {
      if (abort.signal.aborted) return { ok: false, status: 0, error: `the answer did not come whole within ${timeout / 1000} s` };
      out.ok = false;
      out.problem = { title: 'unreadable answer', detail: String(e) };
    }
    if (resp.status === 401) window.dispatchEvent(new CustomEvent('idem:unauthorized', { detail: out }));
    return out;
  } finally {
    clearTimeout(timer);
  }
}

let gateway = null; // GET /v1/stats's upstream and reconcile flag, read once

// gatewayInfo returns the gateway's upstream and whether it has a
// reconcile lookup, asked once.
export async function gatewayInfo() {
  if (!gateway) {
    const res = await call('v1/stats');
    if (res.ok) gateway = { upstream: res.data.upstream, reconcile: res.data.reconcile };
  }
  return gateway || { upstream: '(unknown)', reconcile: false };
}
