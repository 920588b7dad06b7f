// The page's small tools: finding and making elements (HTML and SVG; what
// the server sends always goes in as text or attributes, never as HTML),
// links to a session, local and session storage that tolerate private
// mode, and notices under the story.

export const $ = (id) => document.getElementById(id);
const SVG_NS = 'http://www.w3.org/2000/svg';

export function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

export function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) e.setAttribute(k, String(v));
  }
  if (text !== undefined) e.textContent = String(text);
  return e;
}

export function icon(name, cls) {
  const s = svg('svg', { class: 'icon' + (cls ? ' ' + cls : ''), 'aria-hidden': 'true' });
  s.appendChild(svg('use', { href: '#i-' + name }));
  return s;
}

export function sessionLink(id, token) {
  return `${location.origin}/?session=${encodeURIComponent(id)}&token=${encodeURIComponent(token)}`;
}

export function short(value, max = 60) {
  let s = typeof value === 'string' ? value : JSON.stringify(value);
  if (s === undefined) s = String(value);
  return s.length > max ? s.slice(0, max - 1) + '…' : s;
}

function store(kind) {
  try { return kind === 'local' ? window.localStorage : window.sessionStorage; } catch { return null; }
}

export function readJson(kind, key, fallback) {
  try { return JSON.parse(store(kind).getItem(key)) ?? fallback; } catch { return fallback; }
}

export function writeJson(kind, key, value) {
  try { store(kind).setItem(key, JSON.stringify(value)); } catch { /* private mode: keep in memory only */ }
}

// A short message under the timeline that never blocks the chat.
export function notice(text, kind = 'info', ms = 6000, code = '') {
  const box = $('notices');
  const n = el('div', 'notice ' + kind);
  if (code) n.dataset.code = code;
  n.append(icon(kind === 'error' ? 'alert' : 'spark'), el('span', null, text));
  box.appendChild(n);
  while (box.children.length > 3) box.firstChild.remove();
  if (ms) setTimeout(() => n.remove(), ms);
  return n;
}
