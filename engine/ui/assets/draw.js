// The run and workflow graphs (layered by dependency depth) and the Gantt of attempts, as SVG.
import {svg, fmtDuration} from "./dom.js";

const NODE_W = 168, NODE_H = 40, GAP_X = 56, GAP_Y = 12, PAD = 14;

// drawGraph returns an <svg data-testid=testid> of graph {nodes, edges}; status(node) gives a
// node's data-status and sub(node) its second line; onPick(node) is called on a click.
export function drawGraph(graph, {testid, status = () => "declared", sub = (n) => n.tool || n.kind, onPick} = {}) {
  const layers = new Map();
  for (const n of graph.nodes) {
    const l = n.layer || 0;
    if (!layers.has(l)) layers.set(l, []);
    layers.get(l).push(n);
  }
  const pos = new Map();
  let maxRows = 1;
  const cols = Math.max(1, ...[...layers.keys()].map((l) => l + 1));
  for (const [l, ns] of layers) {
    maxRows = Math.max(maxRows, ns.length);
    ns.forEach((n, i) => pos.set(n.id, {x: PAD + l * (NODE_W + GAP_X), y: PAD + i * (NODE_H + GAP_Y)}));
  }
  const width = PAD * 2 + cols * NODE_W + (cols - 1) * GAP_X;
  const height = PAD * 2 + maxRows * NODE_H + (maxRows - 1) * GAP_Y;
  const root = svg("svg", {"data-testid": testid, class: "graph", width, height, viewBox: `0 0 ${width} ${height}`, role: "img"});
  const edges = svg("g", {class: "edges"});
  for (const e of graph.edges) {
    const a = pos.get(e.from), b = pos.get(e.to);
    if (!a || !b) continue;
    const x1 = a.x + NODE_W, y1 = a.y + NODE_H / 2, x2 = b.x, y2 = b.y + NODE_H / 2;
    const mx = (x1 + x2) / 2;
    edges.append(svg("path", {class: "edge", d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`}));
  }
  root.append(edges);
  for (const n of graph.nodes) {
    const p = pos.get(n.id);
    const g = svg("g", {"data-testid": "step-node", class: "node", "data-step": n.id, "data-status": status(n),
      transform: `translate(${p.x},${p.y})`});
    const label = n.label.length > 22 ? n.label.slice(0, 21) + "…" : n.label;
    const second = String(sub(n) || "");
    g.append(
      svg("title", {text: `${n.id} (${n.kind}${n.tool ? ": " + n.tool : ""})${n.parent ? " in " + n.parent : ""}${n.on_failure ? ", on_failure" : ""}`}),
      svg("rect", {class: "box", width: NODE_W, height: NODE_H}),
      svg("rect", {class: "stripe", width: 4, height: NODE_H - 8, x: 4, y: 4, rx: 2}),
      svg("text", {x: 14, y: 17, text: label}),
      svg("text", {x: 14, y: 31, class: "sub", text: second.length > 28 ? second.slice(0, 27) + "…" : second}),
    );
    if (onPick) g.addEventListener("click", () => onPick(n));
    root.append(g);
  }
  return root;
}

const ROW_H = 20, LABEL_W = 200, MAX_ROWS = 400;

// drawGantt returns an <svg data-testid="run-gantt"> of attempts (one row per step instance, a
// gantt-bar per attempt); width is the pixel width to fill.
export function drawGantt(attempts, width, onPick) {
  const rows = [];
  const rowOf = new Map();
  for (const a of attempts) {
    if (!rowOf.has(a.step_key)) {
      if (rows.length >= MAX_ROWS) continue;
      rowOf.set(a.step_key, rows.length);
      rows.push(a.step_key);
    }
  }
  const now = Date.now();
  let t0 = Infinity, t1 = -Infinity;
  for (const a of attempts) {
    if (!rowOf.has(a.step_key)) continue;
    const s = Date.parse(a.started_at), e = a.finished_at ? Date.parse(a.finished_at) : now;
    t0 = Math.min(t0, s); t1 = Math.max(t1, e);
  }
  if (!isFinite(t0)) { t0 = now; t1 = now + 1000; }
  const span = Math.max(t1 - t0, 1);
  const w = Math.max(width, 480), plotW = w - LABEL_W - 16;
  const height = 24 + rows.length * ROW_H + 6;
  const root = svg("svg", {"data-testid": "run-gantt", class: "gantt", width: w, height, viewBox: `0 0 ${w} ${height}`});
  // time axis: 6 ticks, with the decimals a short run needs to tell them apart (a 3 ms run:
  // +0.6 ms, +1.2 ms, …), the last label right-aligned on its tick so that it stays in the chart
  const step = span / 5;
  const tick = (v) => step >= 10 ? fmtDuration(v) : v.toFixed(step >= 1 ? 1 : 2) + " ms";
  for (let i = 0; i <= 5; i++) {
    const x = LABEL_W + (plotW * i) / 5;
    const last = i === 5;
    root.append(svg("line", {class: "tick", x1: x, x2: x, y1: 18, y2: height}),
      svg("text", {x: last ? x - 3 : x + 3, y: 12, "text-anchor": last ? "end" : "start", text: "+" + tick(step * i)}));
  }
  rows.forEach((k, i) => {
    const y = 24 + i * ROW_H;
    root.append(svg("rect", {class: "lane" + (i % 2 ? " alt" : ""), x: 0, y, width: w, height: ROW_H}),
      svg("text", {class: "key", x: 6, y: y + 14, text: k.length > 30 ? "…" + k.slice(-29) : k}));
  });
  for (const a of attempts) {
    const r = rowOf.get(a.step_key);
    if (r === undefined) continue;
    const s = Date.parse(a.started_at), e = a.finished_at ? Date.parse(a.finished_at) : now;
    const x = LABEL_W + ((s - t0) / span) * plotW;
    const bw = Math.max(2, ((e - s) / span) * plotW);
    const g = svg("g", {"data-testid": "gantt-bar", "data-step": a.step_key, "data-step-id": a.step_id,
      "data-attempt": a.attempt, "data-status": a.status});
    g.append(svg("title", {text: `${a.step_key} attempt ${a.attempt}: ${a.status}, ${fmtDuration(e - s)}${a.worker ? " on " + a.worker : ""}${a.error ? "\n" + (a.error.kind || "") + ": " + a.error.message : ""}`}),
      svg("rect", {class: "gbar", x, y: 24 + r * ROW_H + 4, width: bw, height: ROW_H - 8}));
    if (onPick) g.addEventListener("click", () => onPick(a.step_key));
    root.append(g);
  }
  return root;
}
