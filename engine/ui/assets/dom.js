// DOM helpers. Every piece of run data reaches the page through textContent or an attribute:
// nothing here parses HTML.

const SVG_NS = "http://www.w3.org/2000/svg";

// el("td", {class: "num", "data-testid": "x", text: "42"}, child, …) builds an element.
export function el(tag, attrs = {}, ...children) {
  return build(document.createElement(tag), attrs, children);
}

// svg("rect", {x: 1, …}) builds an SVG element.
export function svg(tag, attrs = {}, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

function build(node, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "text") node.textContent = String(v);
    else if (k === "class") node.setAttribute("class", v);
    else if (k.startsWith("on") && typeof v === "function") node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

// fill replaces the children of node with children (null, undefined and false are skipped).
export function fill(node, ...children) {
  clear(node);
  node.append(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

// clear removes every child of node.
export function clear(node) {
  while (node.firstChild) node.firstChild.remove();
  return node;
}

export function fmtTime(s) {
  if (!s) return "";
  const d = new Date(s);
  if (isNaN(d)) return "";
  const now = new Date();
  const sameDay = d.toDateString() === now.toDateString();
  const t = d.toLocaleTimeString([], {hour: "2-digit", minute: "2-digit", second: "2-digit"});
  return sameDay ? t : d.toLocaleDateString([], {month: "short", day: "numeric"}) + " " + t;
}

export function fmtDuration(ms) {
  if (ms == null || ms < 0 || !isFinite(ms)) return "";
  if (ms < 1000) return Math.round(ms) + " ms";
  const s = ms / 1000;
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + " s";
  const m = Math.floor(s / 60), r = Math.round(s % 60);
  if (m < 60) return m + "m " + String(r).padStart(2, "0") + "s";
  const h = Math.floor(m / 60);
  return h + "h " + String(m % 60).padStart(2, "0") + "m";
}

export function fmtRelative(s) {
  if (!s) return "";
  const ms = new Date(s) - Date.now();
  const abs = Math.abs(ms);
  const txt = abs < 60000 ? Math.round(abs / 1000) + " s" : fmtDuration(abs);
  return ms >= 0 ? "in " + txt : txt + " ago";
}

export function durationOf(start, end) {
  if (!start) return "";
  const a = new Date(start), b = end ? new Date(end) : new Date();
  return fmtDuration(b - a);
}
