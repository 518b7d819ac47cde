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

// tenantSeg writes a tenant's path segment: "-" is the empty tenant, and
// a tenant made of dashes gets one more (the admin API's rule).
export function tenantSeg(tenant) {
  return seg(/^-*$/.test(tenant) ? `-${tenant}` : tenant);
}

// keyPath is the admin path of a key, with a suffix such as "/resolve".
export function keyPath(tenant, key, suffix = '') {
  return `v1/keys/${tenantSeg(tenant)}/${seg(key)}${suffix}`;
}

// call sends one request and resolves, never rejects, with
// {ok, status, data, problem, error}. A 401 fires "idem:unauthorized".
export async function call(path, { method = 'GET', query, body } = {}) {
  const url = new URL(path, base);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== '') url.searchParams.set(k, v);
  }
  const headers = { Accept: 'application/json' };
  const t = token();
  if (t) headers.Authorization = `Bearer ${t}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let resp;
  try {
    resp = await fetch(url, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'omit', cache: 'no-store', redirect: 'error',
    });
  } catch (e) {
    return { ok: false, status: 0, error: String(e && e.message ? e.message : e) };
  }
  const out = { ok: resp.ok, status: resp.status };
  const type = resp.headers.get('Content-Type') || '';
  if (type.includes('json')) {
    try {
      const data = await resp.json();
      if (resp.ok) out.data = data; else out.problem = data;
    } catch (e) {
      out.problem = { title: 'unreadable answer', detail: String(e) };
    }
  } else if (!resp.ok) {
    out.problem = { title: (await resp.text()).slice(0, 300) };
  }
  if (resp.status === 401) window.dispatchEvent(new CustomEvent('idem:unauthorized', { detail: out }));
  return out;
}
