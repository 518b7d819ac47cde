// Building the page from data. Everything a client, an upstream or the
// store gave us (keys, tenants, reasons, headers, bodies) goes into the
// page as text nodes or attribute values set through the DOM, never parsed
// as HTML: this module is the only place that creates elements.

const SVG = 'http://www.w3.org/2000/svg';

// h creates an HTML element: attrs are set with setAttribute (or, for
// "on", as event listeners), children are nodes, or strings and numbers
// that become text nodes. null and false children are skipped.
export function h(tag, attrs, ...children) {
  return fill(document.createElement(tag), attrs, children);
}

// s creates an SVG element, as h does.
export function s(tag, attrs, ...children) {
  return fill(document.createElementNS(SVG, tag), attrs, children);
}

function fill(el, attrs, children) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === 'on') {
      for (const [event, fn] of Object.entries(value)) el.addEventListener(event, fn);
    } else if (value !== null && value !== undefined && value !== false) {
      el.setAttribute(name, value === true ? '' : String(value));
    }
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

// show replaces what el holds with the nodes.
export function show(el, ...nodes) {
  el.replaceChildren(...nodes.flat().filter((n) => n !== null && n !== undefined && n !== false));
}

// trouble names what stands behind a failed call: 'api' when the admin
// API gave no answer, 'store' when it answered that the store does not
// (503 store_unavailable), '' for any other refusal.
export function trouble(res) {
  if (res.status === 0) return 'api';
  if (res.status === 503 && res.problem && res.problem.code === 'store_unavailable') return 'store';
  return '';
}

// problemText is one line saying what a failed call got: the problem's
// title and detail, or the HTTP status.
export function problemText(res) {
  if (res.status === 0) return `the admin API did not answer: ${res.error}`;
  if (trouble(res) === 'store') {
    return `the store is unavailable (the admin API answers, its store does not): ${(res.problem && res.problem.detail) || '503'}`;
  }
  const p = res.problem || {};
  const parts = [`${res.status}`];
  if (p.code) parts.push(p.code);
  if (p.title) parts.push(p.title);
  let line = parts.join(' ');
  if (p.detail) line += `: ${p.detail}`;
  return line;
}

// loadError is what a view shows when its data did not come: what the
// call got (data-trouble says whether the admin API or its store is
// down), and a button that asks again.
export function loadError(res, retry) {
  return h('div', { class: 'load-error', id: 'load-error', role: 'alert', 'data-trouble': trouble(res) },
    h('p', { class: 'problem' }, problemText(res)),
    h('button', { type: 'button', id: 'retry', on: { click: retry } }, 'Retry'));
}

// age says how long ago an ISO time was, in the largest unit.
export function age(iso, now = Date.now()) {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return '';
  return duration(Math.max(0, now - t) / 1000);
}

// duration writes seconds as "100ms", "45s", "12m", "3h 5m" or "2d 4h".
export function duration(sec) {
  if (sec > 0 && sec < 1) return `${Math.round(sec * 1000)}ms`;
  sec = Math.round(sec);
  if (sec < 60) return `${sec}s`;
  const m = Math.floor(sec / 60);
  if (m < 60) return `${m}m`;
  const hrs = Math.floor(m / 60);
  if (hrs < 48) return `${hrs}h ${m % 60}m`;
  return `${Math.floor(hrs / 24)}d ${hrs % 24}h`;
}

// time writes an ISO time as the browser's local date and time.
export function time(iso) {
  const t = Date.parse(iso);
  return Number.isNaN(t) ? '' : new Date(t).toLocaleString();
}
