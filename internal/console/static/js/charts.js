// Line charts drawn as inline SVG from numbers, with DOM calls only.
import { h, s } from './dom.js';

const W = 480; // the viewBox; CSS scales the chart to its box
const H = 150;
const PAD = { left: 42, right: 10, top: 10, bottom: 22 };
const COLORS = 8; // .s0 ... .s7 in console.css

// niceMax rounds a maximum up to 1, 2 or 5 times a power of ten.
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function label(v) {
  if (v >= 1e6) return `${+(v / 1e6).toFixed(1)}M`;
  if (v >= 1e3) return `${+(v / 1e3).toFixed(1)}k`;
  return `${+v.toFixed(v < 10 ? 1 : 0)}`;
}

// lineChart draws series ({name, points: [[ms, value], ...], total, color}) over
// the time span [from, to] (ms). The legend shows each series' total, or
// its last value when total is undefined.
export function lineChart(title, series, from, to, unit = '') {
  const x0 = PAD.left;
  const x1 = W - PAD.right;
  const y0 = H - PAD.bottom;
  const y1 = PAD.top;
  const max = niceMax(Math.max(0, ...series.flatMap((sr) => sr.points.map((p) => p[1]))));
  const span = Math.max(1, to - from);
  const x = (t) => x0 + ((t - from) / span) * (x1 - x0);
  const y = (v) => y0 - (v / max) * (y0 - y1);

  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': title, class: 'plot' },
    s('title', {}, title));
  for (const v of [0, max / 2, max]) {
    svg.append(s('line', { x1: x0, x2: x1, y1: y(v), y2: y(v), class: v === 0 ? 'axis' : 'grid' }));
    svg.append(s('text', { x: x0 - 6, y: y(v) + 4, class: 'tick', 'text-anchor': 'end' }, label(v) + unit));
  }
  const minutes = Math.round(span / 60000);
  svg.append(s('text', { x: x0, y: H - 6, class: 'tick', 'text-anchor': 'start' },
    minutes >= 1 ? `-${minutes}m` : `-${Math.round(span / 1000)}s`));
  svg.append(s('text', { x: x1, y: H - 6, class: 'tick', 'text-anchor': 'end' }, 'now'));

  const legend = h('ul', { class: 'legend' });
  series.forEach((sr, i) => {
    const cls = `s${(sr.color ?? i) % COLORS}`;
    if (sr.points.length === 1) {
      const [t, v] = sr.points[0];
      svg.append(s('circle', { cx: x(t), cy: y(v), r: 2.5, class: `dot ${cls}` }));
    } else if (sr.points.length > 1) {
      const pts = sr.points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(' ');
      svg.append(s('polyline', { points: pts, class: `line ${cls}` }));
    }
    const last = sr.points.length ? sr.points[sr.points.length - 1][1] : 0;
    legend.append(h('li', {}, h('span', { class: `swatch ${cls}` }), `${sr.name} `,
      h('b', {}, label(sr.total !== undefined ? sr.total : last))));
  });
  if (series.every((sr) => sr.points.length === 0)) {
    svg.append(s('text', { x: (x0 + x1) / 2, y: (y0 + y1) / 2, class: 'empty', 'text-anchor': 'middle' }, 'no data yet'));
  }
  return h('figure', { class: 'chart' }, h('figcaption', {}, title), svg, legend);
}
