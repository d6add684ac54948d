// The graph behind an answer, drawn as plain SVG: the context's entities, the relations between them
// (each relation item's `links` are its head and tail entity ids) and hyperedge facts joined to their
// member entities. Laid out by a small spring-electric force simulation, run to rest before drawing.

const SVG = "http://www.w3.org/2000/svg";
const MAX_NODES = 60;
const MAX_FACTS = 12;

function entityLabel(item) {
  const colon = item.text.indexOf(":");
  return colon > 0 ? item.text.slice(0, colon) : item.text;
}

// {nodes: [{id, kind, label, text, sources}], edges: [{source, target, kind, label}]} from a query's context.
// What connects comes first (relations, then up to MAX_FACTS facts with their members), then the other
// entities in score order, up to MAX_NODES: a mode may return a hundred entities.
export function graphOf(context) {
  const nodes = new Map();
  const edges = [];
  const add = (id, fields) => {
    if (!nodes.has(id) && nodes.size < MAX_NODES) nodes.set(id, { id, ...fields });
    return nodes.has(id);
  };
  const known = new Map((context.entities ?? []).map((item) => [item.id, item]));
  // An entity outside the context's entities is named by its id (the normalized entity name).
  const entity = (id) => {
    const item = known.get(id);
    return add(`e:${id}`, item ? { kind: "entity", label: entityLabel(item), text: item.text, sources: item.sources }
      : { kind: "entity", label: id, text: "", sources: [] });
  };
  for (const rel of context.relations ?? []) {
    const [head, tail] = rel.links ?? [];
    if (head === undefined || tail === undefined || !entity(head) || !entity(tail)) continue;
    edges.push({ source: `e:${head}`, target: `e:${tail}`, kind: "relation", label: rel.text });
    for (const end of new Set([head, tail])) (nodes.get(`e:${end}`).relations ??= []).push(rel.text);
  }
  for (const fact of (context.hyperedges ?? []).slice(0, MAX_FACTS)) {
    const id = `h:${fact.id}`;
    if (!add(id, { kind: "hyperedge", label: truncate(fact.text, 24), text: fact.text, sources: fact.sources })) {
      continue;
    }
    for (const member of fact.links ?? []) {
      if (entity(member)) edges.push({ source: id, target: `e:${member}`, kind: "member", label: "" });
    }
  }
  for (const item of context.entities ?? []) entity(item.id);
  return { nodes: [...nodes.values()], edges };
}

function truncate(text, n) {
  return text.length > n ? `${text.slice(0, n - 1)}…` : text;
}

// Positions in [0, width] x [0, height] (Fruchterman-Reingold): repulsion k²/d between nodes closer than
// 2k (beyond it, pieces of the graph that share no edge would drift to the walls), attraction d²/k along
// the edges, a pull to the centre, and a cooling step size; deterministic (initial places on a circle).
export function layout(graph, width, height, iterations = 300) {
  const n = graph.nodes.length;
  const index = new Map(graph.nodes.map((node, i) => [node.id, i]));
  const x = new Float64Array(n);
  const y = new Float64Array(n);
  const radius = Math.min(width, height) / 3;
  for (let i = 0; i < n; i++) {
    x[i] = width / 2 + radius * Math.cos((2 * Math.PI * i) / Math.max(n, 1));
    y[i] = height / 2 + radius * Math.sin((2 * Math.PI * i) / Math.max(n, 1));
  }
  const k = Math.sqrt((width * height) / Math.max(n, 1)) * 0.6; // ideal edge length
  const links = graph.edges.map((e) => [index.get(e.source), index.get(e.target)]);
  for (let step = 0; step < iterations; step++) {
    const temperature = (Math.min(width, height) / 8) * (1 - step / iterations) + 0.5;
    const dx = new Float64Array(n);
    const dy = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      for (let j = i + 1; j < n; j++) {
        let ddx = x[i] - x[j];
        let ddy = y[i] - y[j];
        let d2 = ddx * ddx + ddy * ddy;
        if (d2 < 0.01) { ddx = 0.1 * (i - j); ddy = 0.1; d2 = ddx * ddx + ddy * ddy; }
        if (d2 > 4 * k * k) continue;
        const force = (k * k) / d2; // repulsion k²/d, along the unit vector (ddx/d)
        dx[i] += ddx * force; dy[i] += ddy * force;
        dx[j] -= ddx * force; dy[j] -= ddy * force;
      }
    }
    for (const [a, b] of links) {
      const ddx = x[a] - x[b];
      const ddy = y[a] - y[b];
      const d = Math.sqrt(ddx * ddx + ddy * ddy) || 0.01;
      const force = d / k; // attraction d²/k, along the unit vector
      dx[a] -= ddx * force; dy[a] -= ddy * force;
      dx[b] += ddx * force; dy[b] += ddy * force;
    }
    for (let i = 0; i < n; i++) {
      dx[i] += (width / 2 - x[i]) * 0.01 * k;
      dy[i] += (height / 2 - y[i]) * 0.01 * k;
      const d = Math.sqrt(dx[i] * dx[i] + dy[i] * dy[i]) || 1;
      const move = Math.min(d, temperature);
      x[i] = Math.min(width - 30, Math.max(30, x[i] + (dx[i] / d) * move));
      y[i] = Math.min(height - 20, Math.max(20, y[i] + (dy[i] / d) * move));
    }
  }
  return graph.nodes.map((node, i) => ({ ...node, x: x[i], y: y[i] }));
}

function el(name, attrs, text) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

// Draws `graph` into `svg`; `onSelect(node)` when a node is clicked or activated from the keyboard.
export function draw(svg, graph, onSelect) {
  svg.replaceChildren();
  const box = svg.viewBox.baseVal;
  const placed = layout(graph, box.width, box.height);
  const at = new Map(placed.map((node) => [node.id, node]));
  const edgeLayer = el("g", { class: "edges" });
  for (const edge of graph.edges) {
    const a = at.get(edge.source);
    const b = at.get(edge.target);
    const line = el("line", { x1: a.x, y1: a.y, x2: b.x, y2: b.y, class: `edge ${edge.kind}` });
    if (edge.label) line.append(el("title", {}, edge.label));
    edgeLayer.append(line);
  }
  const nodeLayer = el("g", { class: "nodes" });
  let selected = null;
  for (const node of placed) {
    const g = el("g", {
      class: `node ${node.kind}`, transform: `translate(${node.x.toFixed(1)},${node.y.toFixed(1)})`,
      tabindex: 0, role: "button", "aria-label": `${node.kind} ${node.label}`, "data-node-id": node.id,
    });
    g.append(node.kind === "entity" ? el("circle", { r: 7 }) : el("rect", { x: -6, y: -6, width: 12, height: 12 }));
    // Labels point towards the centre, so that those of nodes near an edge stay inside the drawing.
    const left = node.x > box.width / 2;
    g.append(el("text", { x: left ? -10 : 10, y: 4, "text-anchor": left ? "end" : "start" }, truncate(node.label, 32)));
    const select = () => {
      selected?.classList.remove("selected");
      selected = g;
      g.classList.add("selected");
      onSelect(node);
    };
    g.addEventListener("click", select);
    g.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") { event.preventDefault(); select(); }
    });
    nodeLayer.append(g);
  }
  svg.append(edgeLayer, nodeLayer);
  return placed;
}
