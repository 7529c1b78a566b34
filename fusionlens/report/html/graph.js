// FusionLens report: the fusion graph (graph.py's data), laid out by dagre (vendor/dagre.min.js:
// a layered, Sugiyama-style layout) and drawn as SVG. Each program is a column, dataflow top to
// bottom, forward and backward side by side, saved tensors linking them. Regions are grouped in
// boxes by the module path of their ops (h.0.attn); a group is one node until clicked, and is
// laid out again when opened or closed. Drag pans, the wheel zooms (docs/pictures.md).
(function () {
  "use strict";
  const NS = "http://www.w3.org/2000/svg";
  const NODE_H = 34, MAX_W = 230, COLUMN_GAP = 70, TITLE_H = 26, MIN_FIT = 0.82;
  const FONT = "11px ui-sans-serif, system-ui, sans-serif";
  let ctx = null;
  const textWidth = (s) => {
    ctx = ctx || document.createElement("canvas").getContext("2d");
    ctx.font = FONT;
    return ctx.measureText(s).width;
  };
  const clip = (s, w) => {
    if (textWidth(s) <= w) return s;
    while (s.length > 1 && textWidth(s + "…") > w) s = s.slice(0, -1);
    return s + "…";
  };
  const svg = (tag, attrs, parent) => {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) e.setAttribute(k, v);
    if (parent) parent.append(e);
    return e;
  };
  const fmt = (ms) => (ms >= 1 ? ms.toFixed(2) + " ms" : ms >= 1e-3 ? (ms * 1e3).toFixed(1) + " µs" : (ms * 1e6).toFixed(0) + " ns");
  const parentOf = (path) => (path.includes(".") ? path.slice(0, path.lastIndexOf(".")) : "");

  // A program's module tree: a box for each module path holding two nodes or more, unless it
  // holds nothing but one such box (h.1.mlp around h.1.mlp.gelu alone); "" is the program itself.
  function tree(program) {
    const count = new Map([["", 0]]);
    for (const n of program.nodes) {
      for (let p = n.module; ; p = parentOf(p)) {
        count.set(p, (count.get(p) || 0) + 1);
        if (p === "") break;
      }
    }
    const kids = new Map();
    for (const p of count.keys()) if (p !== "") (kids.get(parentOf(p)) || kids.set(parentOf(p), []).get(parentOf(p))).push(p);
    const direct = new Map();
    for (const n of program.nodes) direct.set(n.module, (direct.get(n.module) || 0) + 1);
    const boxed = new Set();
    for (const [p, c] of count) {
      const only = (kids.get(p) || []).filter((k) => count.get(k) === c);
      if (p !== "" && c >= 2 && !(only.length === 1 && !direct.get(p))) boxed.add(p);
    }
    const boxOf = (p) => { // the innermost box holding module path p ("" for none)
      while (p !== "" && !boxed.has(p)) p = parentOf(p);
      return p;
    };
    const boxes = new Map();
    for (const p of boxed) boxes.set(p, { path: p, parent: boxOf(parentOf(p)), nodes: [], ms: 0 });
    for (const n of program.nodes) {
      for (let b = boxOf(n.module); b !== ""; b = boxes.get(b).parent) {
        boxes.get(b).nodes.push(n.id);
        boxes.get(b).ms += n.ms || 0;
      }
    }
    return { boxes: boxes, boxOf: (n) => boxOf(n.module) };
  }

  function create(container, onSelect) {
    const tip = document.createElement("div");
    tip.className = "graph-tip";
    container.append(tip);
    const root = svg("svg", { class: "graph-svg", width: "100%" }, container);
    const defs = svg("defs", {}, root);
    const marker = svg("marker", { id: "fl-arrow", viewBox: "0 0 8 8", refX: 8, refY: 4, markerWidth: 7, markerHeight: 7, orient: "auto" }, defs);
    svg("path", { d: "M0,0 L8,4 L0,8 z", class: "arrow" }, marker);
    const view = svg("g", { class: "viewport" }, root);
    let data = null, trees = {}, open = new Set(), selected = new Set(), layout = null;
    let t = { x: 0, y: 0, k: 1 };
    const apply = () => view.setAttribute("transform", `translate(${t.x},${t.y}) scale(${t.k})`);

    // The node a region is drawn as: itself, or the outermost closed box it is in.
    function shownAs(kind, node) {
      const tr = trees[kind];
      let at = node.id;
      for (let b = tr.boxOf(node); b !== ""; b = tr.boxes.get(b).parent) if (!open.has(kind + ":" + b)) at = "box:" + b;
      return at;
    }

    function layoutProgram(program) {
      const kind = program.kind, tr = trees[kind];
      const g = new dagre.graphlib.Graph({ compound: true });
      g.setGraph({ rankdir: "TB", nodesep: 16, ranksep: 34, edgesep: 8, marginx: 4, marginy: 4 });
      g.setDefaultEdgeLabel(() => ({}));
      const at = new Map(program.nodes.map((n) => [n.id, shownAs(kind, n)]));
      const shown = new Set(at.values());
      const isOpen = (b) => open.has(kind + ":" + b);
      const visibleBox = (b) => { // a box is drawn (open, or closed as a node) when no box around it is closed
        for (let p = tr.boxes.get(b).parent; p !== ""; p = tr.boxes.get(p).parent) if (!isOpen(p)) return false;
        return true;
      };
      for (const [b, box] of tr.boxes) {
        if (!visibleBox(b)) continue;
        const name = b;
        if (isOpen(b)) {
          g.setNode("open:" + b, { box: box, name: name, open: true });
        } else if (shown.has("box:" + b)) {
          const line2 = box.nodes.length + " regions · " + fmt(box.ms);
          const w = Math.min(MAX_W, Math.max(textWidth("▸ " + name), textWidth(line2)) + 22);
          g.setNode("box:" + b, { box: box, name: name, width: w, height: NODE_H, line1: "▸ " + name, line2: line2 });
        }
        if (box.parent && visibleBox(b)) g.setParent((isOpen(b) ? "open:" : "box:") + b, "open:" + box.parent);
      }
      for (const n of program.nodes) {
        if (at.get(n.id) !== n.id) continue;
        const line1 = n.id + " " + n.label, line2 = n.time + (n.ends ? " · ends: " + n.ends : "");
        const w = Math.min(MAX_W, Math.max(textWidth(line1), textWidth(line2)) + 22);
        g.setNode(n.id, { node: n, width: w, height: NODE_H, line1: clip(line1, MAX_W - 22), line2: clip(line2, MAX_W - 22) });
        const b = tr.boxOf(n);
        if (b !== "") g.setParent(n.id, "open:" + b);
      }
      const edges = new Map(); // tensors between two shown nodes, once a pair
      for (const e of program.edges) {
        const a = at.get(e.src), b = at.get(e.dst);
        if (!a || !b || a === b) continue;
        const k = a + "\u0000" + b;
        (edges.get(k) || edges.set(k, { src: a, dst: b, tensors: [] }).get(k)).tensors.push(e);
      }
      for (const e of edges.values()) g.setEdge(e.src, e.dst, { edge: e });
      dagre.layout(g);
      return { kind: kind, title: program.title, g: g, at: at, width: g.graph().width || 0, height: g.graph().height || 0 };
    }

    function showTip(ev, text) {
      tip.textContent = text;
      tip.style.display = "block";
      const r = container.getBoundingClientRect();
      tip.style.left = Math.min(ev.clientX - r.left + 12, r.width - 260) + "px";
      tip.style.top = ev.clientY - r.top + 14 + "px";
    }
    const hideTip = () => { tip.style.display = "none"; };
    const hoverable = (el, text) => {
      el.addEventListener("mousemove", (ev) => showTip(ev, text));
      el.addEventListener("mouseleave", hideTip);
    };

    function drawProgram(col, x0, layer) {
      const g = col.g, out = svg("g", { class: "program", "data-program": col.kind, transform: `translate(${x0},${TITLE_H})` }, layer);
      svg("text", { class: "program-title", x: 0, y: -10 }, out).textContent = col.title;
      const boxes = svg("g", {}, out), edges = svg("g", {}, out), nodes = svg("g", {}, out);
      for (const id of g.nodes()) {
        const v = g.node(id);
        if (!v.open) continue;
        const b = svg("g", { class: "box", "data-group": v.box.path, "data-program": col.kind }, boxes);
        svg("rect", { x: v.x - v.width / 2, y: v.y - v.height / 2, width: v.width, height: v.height, rx: 6 }, b);
        const head = svg("text", { class: "box-head", x: v.x - v.width / 2 + 6, y: v.y - v.height / 2 + 12 }, b);
        head.textContent = "▾ " + v.name + " · " + v.box.nodes.length + " regions · " + fmt(v.box.ms);
        hoverable(b, v.box.path + ": click the header to close");
        head.addEventListener("click", (ev) => {
          ev.stopPropagation();
          if (!dragged) toggle(col.kind, v.box.path);
        });
      }
      for (const ends of g.edges()) {
        const e = g.edge(ends), pts = e.points;
        const d = "M" + pts.map((p) => p.x.toFixed(1) + "," + p.y.toFixed(1)).join(" L");
        const text = e.edge.tensors.map((x) => x.text).join("\n") + "\n" + e.edge.src.replace("box:", "") + " → " + e.edge.dst.replace("box:", "");
        svg("path", { class: "edge", d: d, "data-program": col.kind, "marker-end": "url(#fl-arrow)" }, edges);
        const hit = svg("path", { class: "edge-hit", d: d }, edges);
        hoverable(hit, text);
      }
      for (const id of g.nodes()) {
        const v = g.node(id);
        if (v.open || v.width === undefined) continue;
        const n = v.node, x = v.x - v.width / 2, y = v.y - v.height / 2;
        const el = svg("g", n ? { class: "node " + n.kind + (n.saved ? " saved" : ""), "data-id": n.id, "data-program": col.kind }
          : { class: "node group", "data-group": v.box.path, "data-program": col.kind }, nodes);
        svg("rect", { x: x, y: y, width: v.width, height: v.height, rx: n ? 4 : 8 }, el);
        if (n) svg("rect", { class: "stripe", x: x, y: y, width: 5, height: v.height, rx: 2, fill: n.kind === "call" ? "var(--faint)" : n.color }, el);
        svg("text", { class: "l1", x: x + 11, y: y + 14 }, el).textContent = v.line1;
        svg("text", { class: "l2", x: x + 11, y: y + 27 }, el).textContent = v.line2;
        hoverable(el, n ? n.hover + (n.kind === "call" ? "\na torch call of the program between the preview's kernels" : "")
          : v.box.path + ": " + v.box.nodes.length + " regions, " + fmt(v.box.ms) + " (click to open)");
        el.addEventListener("click", () => {
          if (!dragged) n ? onSelect(n.id) : toggle(col.kind, v.box.path);
        });
      }
    }

    // Saved tensors: from the forward node that makes one to each backward node that reads it.
    function drawLinks(cols, xs, layer) {
      const fw = cols.findIndex((c) => c.kind === "forward"), bw = cols.findIndex((c) => c.kind === "backward");
      if (fw < 0 || bw < 0) return;
      const seen = new Map();
      for (const l of data.links) {
        const a = cols[fw].at.get(l.src), b = cols[bw].at.get(l.dst);
        if (!a || !b) continue;
        const k = a + "\u0000" + b;
        (seen.get(k) || seen.set(k, { a: a, b: b, names: [] }).get(k)).names.push(l.tensor);
      }
      for (const s of seen.values()) {
        const va = cols[fw].g.node(s.a), vb = cols[bw].g.node(s.b);
        const x1 = xs[fw] + va.x + va.width / 2, y1 = TITLE_H + va.y, x2 = xs[bw] + vb.x - vb.width / 2, y2 = TITLE_H + vb.y;
        const d = `M${x1},${y1} C${x1 + 40},${y1} ${x2 - 40},${y2} ${x2},${y2}`;
        svg("path", { class: "link", d: d, "data-src": s.a, "data-dst": s.b }, layer);
        hoverable(svg("path", { class: "edge-hit", d: d }, layer), "saved for backward: " + [...new Set(s.names)].join(", ") +
          "\n" + s.a.replace("box:", "") + " → " + s.b.replace("box:", ""));
      }
    }

    function render() {
      hideTip(); // what it was about may be gone
      view.replaceChildren();
      if (!data || !data.programs.length) return;
      const cols = data.programs.map(layoutProgram);
      const xs = [];
      let x = 0;
      for (const c of cols) {
        xs.push(x);
        x += Math.max(c.width, textWidth(c.title) + 10) + COLUMN_GAP;
      }
      const links = svg("g", { class: "links" }, view);
      cols.forEach((c, i) => drawProgram(c, xs[i], view));
      drawLinks(cols, xs, links);
      layout = { width: x - COLUMN_GAP, height: TITLE_H + Math.max(...cols.map((c) => c.height)), cols: cols };
      mark();
    }

    function mark() {
      for (const el of view.querySelectorAll(".node[data-id]")) el.classList.toggle("selected", selected.has(el.dataset.id));
      for (const el of view.querySelectorAll(".node.group")) {
        const box = trees[el.dataset.program].boxes.get(el.dataset.group);
        el.classList.toggle("selected", box.nodes.some((id) => selected.has(id)));
      }
      for (const el of view.querySelectorAll(".link")) {
        el.classList.toggle("selected", [el.dataset.src, el.dataset.dst].some((id) => selected.has(id)));
      }
    }

    function fit() {
      if (!layout) return;
      const w = container.clientWidth || 800;
      // fit the width, but never so small that labels cannot be read (9 px): then pan
      t.k = Math.max(MIN_FIT, Math.min(1, (w - 16) / Math.max(layout.width, 1)));
      t.x = Math.max(8, (w - layout.width * t.k) / 2);
      t.y = 8;
      root.setAttribute("height", Math.round(Math.min(760, Math.max(320, layout.height * t.k + 24))));
      apply();
    }

    // Pan so that an element of the graph is in the middle of the view.
    function panTo(el) {
      if (!el) return;
      const a = root.getBoundingClientRect(), b = el.getBoundingClientRect();
      t.x += a.left + a.width / 2 - (b.left + b.width / 2);
      t.y += a.top + a.height / 2 - (b.top + b.height / 2);
      apply();
    }

    function toggle(kind, path) {
      const k = kind + ":" + path;
      if (open.has(k)) open.delete(k);
      else open.add(k);
      render();
    }

    // pan: drag; zoom: the wheel, about the pointer
    let drag = null, dragged = false; // a drag that moved is no click on what it ends over
    root.addEventListener("mousedown", (ev) => {
      drag = { x: ev.clientX - t.x, y: ev.clientY - t.y, x0: ev.clientX, y0: ev.clientY };
      dragged = false;
    });
    window.addEventListener("mousemove", (ev) => {
      if (!drag) return;
      t.x = ev.clientX - drag.x;
      t.y = ev.clientY - drag.y;
      dragged = dragged || Math.abs(ev.clientX - drag.x0) + Math.abs(ev.clientY - drag.y0) > 4;
      apply();
    });
    window.addEventListener("mouseup", () => { drag = null; });
    root.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const r = root.getBoundingClientRect(), px = ev.clientX - r.left, py = ev.clientY - r.top;
      const k = Math.min(4, Math.max(0.1, t.k * Math.exp(-ev.deltaY * 0.0015)));
      t.x = px - ((px - t.x) * k) / t.k;
      t.y = py - ((py - t.y) * k) / t.k;
      t.k = k;
      apply();
    }, { passive: false });

    const everyBox = () => Object.entries(trees).flatMap(([kind, tr]) => [...tr.boxes.keys()].map((p) => kind + ":" + p));
    return {
      show(graphData) {
        data = graphData;
        trees = Object.fromEntries(data.programs.map((p) => [p.kind, tree(p)]));
        open = new Set();
        selected = new Set();
        render();
        fit();
      },
      highlight(ids) {
        selected = new Set(ids);
        mark();
      },
      // open the boxes around a region, so that it is drawn as itself
      reveal(id) {
        let changed = false;
        for (const p of (data ? data.programs : [])) {
          const n = p.nodes.find((x) => x.id === id);
          if (!n) continue;
          for (let b = trees[p.kind].boxOf(n); b !== ""; b = trees[p.kind].boxes.get(b).parent) {
            if (!open.has(p.kind + ":" + b)) { open.add(p.kind + ":" + b); changed = true; }
          }
        }
        if (changed) render();
        panTo(view.querySelector('.node[data-id="' + CSS.escape(id) + '"]'));
      },
      panTo: panTo,
      toggle: toggle,
      expandAll() { open = new Set(everyBox()); render(); },
      collapseAll() { open = new Set(); render(); },
      fit: fit,
      zoom(f) { t.k = Math.min(4, Math.max(0.1, t.k * f)); apply(); },
      state: () => ({ open: [...open], transform: Object.assign({}, t), width: layout && layout.width }),
    };
  }

  window.FusionGraph = { create: create };
})();
