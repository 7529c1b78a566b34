// FusionLens report page: the target menu, the plan menu, and selection and linking between
// the source, the details panel and the pictures. The data is the JSON in #fl-data
// (fusionlens/report/html/page.py), one entry a target; Plotly draws the roofline and the
// timeline, graph.js the fusion graph.
(function () {
  "use strict";
  const page = JSON.parse(document.getElementById("fl-data").textContent);
  const vscode = typeof acquireVsCodeApi === "function" ? acquireVsCodeApi() : null;
  const config = { displayModeBar: false, responsive: true };
  const charts = { roofline: "roofline", timeline: "timeline" };
  let target = page.targets[page.first];
  let data = target.data || { plans: [], figures: {}, graphs: {}, ops: {} };
  let plan = data.plans[0];
  let graph = null; // graph.js's view of #fusion-graph
  let selection = null; // {file, line, region, regions}

  const $ = (sel, root) => (root || document).querySelector(sel);
  const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const key = (file, line) => file + ":" + line;
  // a preview's regions, and the program's torch calls between them (linear, SDPA: not previewed)
  const regionsOf = (p) => Object.values(p.programs).flat().concat(Object.values(p.calls || {}).flat());
  const regionById = (id) => regionsOf(plan).find((r) => r.id === id) || null;
  const linesOf = (file, line) => regionsOf(plan).filter((r) => r.lines.some(([f, n]) => f === file && n === line));

  // Scroll `pane` (not the page) so that `row` shows, where it does not already.
  function scrollWithin(pane, row) {
    const top = row.offsetTop, bottom = top + row.offsetHeight;
    if (top < pane.scrollTop || bottom > pane.scrollTop + pane.clientHeight) {
      pane.scrollTop = Math.max(0, top - pane.clientHeight / 3);
    }
  }

  function reveal(file, line) {
    if (vscode) vscode.postMessage({ type: "reveal", file: file, line: line });
  }

  function shadeSource() {
    const heat = plan.heat;
    const top = Math.max(0, ...Object.values(heat));
    for (const row of $$("#source .ln")) {
      const ms = heat[key(row.dataset.file, Number(row.dataset.line))];
      row.style.setProperty("--heat", ms && top ? Math.sqrt(ms / top).toFixed(3) : "0");
      $(".ms", row).textContent = ms ? plan.heat_text[key(row.dataset.file, row.dataset.line)] || "" : "";
      row.classList.toggle("has-ops", linesOf(row.dataset.file, Number(row.dataset.line)).length > 0);
    }
    $("#heat-note").textContent = plan.note;
    // the costliest line in view, scrolling the source pane only (not the page)
    const hottest = Object.entries(heat).sort((a, b) => b[1] - a[1])[0];
    const row = hottest && $$("#source .ln").find((r) => key(r.dataset.file, r.dataset.line) === hottest[0]);
    const pane = $("#source");
    if (row) scrollWithin(pane, row);
  }

  function highlight(ids, file, line) {
    const lines = new Set(regionsOf(plan).filter((r) => ids.includes(r.id)).flatMap((r) => r.lines.map(([f, n]) => key(f, n))));
    for (const row of $$("#source .ln")) {
      const k = key(row.dataset.file, row.dataset.line);
      row.classList.toggle("in-region", lines.has(k));
      row.classList.toggle("selected", file !== undefined && k === key(file, line));
    }
    for (const name of Object.keys(charts)) {
      const gd = document.getElementById(charts[name]);
      if (!gd.data) continue;
      const traces = [], picks = [];
      gd.data.forEach((t, i) => {
        if (!t.customdata || t.meta === "stages") return;
        traces.push(i);
        picks.push(ids.length ? t.customdata.map((c, j) => (ids.includes(c) ? j : -1)).filter((j) => j >= 0) : null);
      });
      if (traces.length) Plotly.restyle(gd, { selectedpoints: picks }, traces);
    }
    if (graph) graph.highlight(ids);
  }

  // The regions of the other program that share a region's saved tensors: a forward region's
  // readers in the backward, a backward region's makers in the forward.
  function savedPartners(r) {
    if (!r.saved.length) return [];
    const names = new Set(r.saved);
    const side = r.program === "forward" ? "inputs" : "outputs";
    return regionsOf(plan).filter((o) => o.program !== r.program && o[side].some((t) => names.has(t.name)));
  }

  function tensorText(t) {
    return t.name + ": " + t.dtype + "[" + t.shape.join(", ") + "]" + (t.size ? " · " + t.size : "");
  }

  function regionCard(r, file, line) {
    const card = el("div", "region");
    card.dataset.region = r.id;
    const head = el("div", "region-head");
    const badge = el("span", "badge " + r.executor, r.executor);
    head.append(el("b", null, r.id + " "), badge, el("span", "muted", " " + r.program + " · " + r.time + " (" + r.basis + ")"));
    card.append(head);
    const facts = el("ul", "facts");
    if (r.bound) facts.append(el("li", null, r.bound + "-bound · roofline " + r.roof));
    if (r.boundary) facts.append(el("li", "boundary", "ends: " + r.boundary));
    if (r.saved.length) {
      const partners = savedPartners(r).map((o) => o.id).join(", ");
      facts.append(el("li", "saved", (r.program === "forward" ? "saves for backward: " : "reads saved: ") + r.saved.join(", ") +
        (partners ? (r.program === "forward" ? " (read by " : " (saved by ") + partners + ")" : "")));
    }
    facts.append(el("li", null, "in: " + (r.inputs.map(tensorText).join("; ") || "-")));
    facts.append(el("li", null, "out: " + (r.outputs.map(tensorText).join("; ") || "-")));
    facts.append(el("li", "muted", "ops: " + r.ops.join(", ")));
    card.append(facts);
    const pre = el("pre", "code");
    r.code.forEach((text, i) => {
      const span = el("span", "cl", text + "\n");
      const src = r.code_lines[i];
      if (src) {
        span.classList.add("src-link");
        span.dataset.file = src[0];
        span.dataset.line = String(src[1]);
        span.title = "go to " + src[0].split("/").pop() + ":" + src[1];
        if (src[0] === file && src[1] === line) span.classList.add("here");
      }
      pre.append(span);
    });
    card.append(pre);
    return card;
  }

  function showDetails(title, ops, regions, file, line) {
    const d = $("#details");
    d.replaceChildren(el("h2", null, title));
    if (ops.length) {
      d.append(el("h3", null, "ops on this line (optimised trace)"));
      const list = el("pre", "trace");
      list.textContent = ops.map((o) => o.trace + (o.region ? "   # ran in " + o.region : "")).join("\n");
      d.append(list);
    }
    d.append(el("h3", null, regions.length ? "regions (" + regions.length + ")" : "no region in this view"));
    for (const r of regions) d.append(regionCard(r, file, line));
    const here = $(".cl.here", d);
    if (here) scrollWithin(here.parentElement, here);
  }


  function selectLine(file, line, opts) {
    line = Number(line);
    const regions = linesOf(file, line);
    selection = { file: file, line: line, region: regions.length ? regions[0].id : null, regions: regions.map((r) => r.id) };
    highlight(selection.regions, file, line);
    const row = $('#source .ln[data-file="' + CSS.escape(file) + '"][data-line="' + line + '"]');
    if (row && !(opts && opts.noScroll)) scrollWithin($("#source"), row);
    const ops = data.ops[key(file, line)] || [];
    showDetails(file.split("/").pop() + ":" + line, ops, regions, file, line);
    if (opts && opts.reveal) reveal(file, line);
    return selection;
  }

  function selectRegion(id, opts) {
    const r = regionById(id);
    if (!r) return null;
    const first = r.lines[0];
    selection = { file: first ? first[0] : null, line: first ? first[1] : null, region: r.id, regions: [r.id] };
    if (graph) graph.reveal(r.id);
    highlight([r.id].concat(savedPartners(r).map((o) => o.id))); // and where its saved tensors go (come from)
    const row = first && $('#source .ln[data-file="' + CSS.escape(first[0]) + '"][data-line="' + first[1] + '"]');
    if (row) scrollWithin($("#source"), row);
    showDetails("region " + r.id, [], [r], null, null);
    if (first && opts && opts.reveal) reveal(first[0], first[1]);
    return selection;
  }

  // VS Code's dark themes (body.vscode-dark, or a dark high-contrast one): the figures' light ink
  // (fusionlens/report/html/figures.py's FG, GRID, BG and edge colours) swapped for the page's
  // CSS variables, which take VS Code's; every axis' lines too (Plotly's template draws them white).
  const isDark = () => {
    const c = document.body.classList;
    return c.contains("vscode-dark") || (c.contains("vscode-high-contrast") && !c.contains("vscode-high-contrast-light"));
  };
  const LIGHT_INK = { "#24292f": "--fg", "#eef0f3": "--grid", "#ffffff": "--pane", "#c3c9d1": "--edge", "#57606a": "--muted",
    "#24292e": "--line" };
  function themed(fig) {
    if (!isDark()) return fig;
    const css = getComputedStyle(document.body);
    let text = JSON.stringify(fig);
    for (const [light, name] of Object.entries(LIGHT_INK)) {
      const dark = css.getPropertyValue(name).trim();
      if (dark) text = text.split('"' + light + '"').join(JSON.stringify(dark));
    }
    const out = JSON.parse(text);
    const grid = css.getPropertyValue("--grid").trim();
    for (const k of Object.keys(out.layout)) {
      if (/^[xy]axis\d*$/.test(k)) Object.assign(out.layout[k], { gridcolor: grid, zerolinecolor: grid, linecolor: grid });
    }
    return out;
  }

  // What the page shows says which plan it is: a preview (the plan for the GPU, not run here)
  // or what ran here, with the other one button away.
  function planNote() {
    const note = $("#plan-note");
    note.replaceChildren();
    const ran = data.plans.find((p) => p.ran), preview = data.plans.find((p) => !p.ran && p.key === data.default) ||
      data.plans.find((p) => !p.ran);
    note.className = plan.ran ? "ran" : "preview";
    note.append(el("b", null, plan.ran ? "what ran here (" + data.device + ")" :
      plan.key + " preview: the plan for " + data.gpu + ", estimated, not run on this machine"));
    const other = plan.ran ? preview : ran;
    if (other && other !== plan) {
      const b = el("button", null, other.ran ? "show what ran here" : "show the " + other.key + " preview");
      b.type = "button";
      b.addEventListener("click", () => setPlan(other.key));
      note.append(" ", b);
    }
  }

  function setPlan(key) {
    plan = data.plans.find((p) => p.key === key) || data.plans[0];
    $("#plan").value = plan.key;
    draw();
  }

  function draw() {
    planNote();
    graph.show(data.graphs[plan.key]);
    const legend = $("#graph-legend");
    legend.replaceChildren(...data.graphs[plan.key].legend.map((l) => {
      const s = el("span", "key", l.name);
      s.style.setProperty("--key", l.color);
      return s;
    }));
    drawCharts();
    shadeSource();
    selection = null;
    $("#details").replaceChildren(el("p", "muted", "Click a line of the source, or a region in a picture."));
  }

  // The Plotly charts (roofline, timeline). plotly.js comes as text (#plotly-js) and runs once the
  // page has shown its source and graph (a script element made with the page's nonce: no eval),
  // so the first screen does not wait for 1.2 MB of it to be parsed.
  const nonce = document.currentScript ? document.currentScript.nonce : "";
  function loadPlotly() {
    const text = document.getElementById("plotly-js");
    if (typeof Plotly !== "undefined" || !text) return;
    const script = document.createElement("script");
    if (nonce) script.nonce = nonce;
    script.textContent = text.textContent;
    document.head.append(script);
  }

  function drawCharts() {
    if (typeof Plotly === "undefined" || !data.figures[plan.key]) return;
    const figs = data.figures[plan.key];
    for (const name of Object.keys(charts)) {
      const gd = document.getElementById(charts[name]);
      const fig = themed(figs[name]);
      Plotly.react(gd, fig.data, fig.layout, config);
      if (!gd.dataset.bound) {
        gd.dataset.bound = "1";
        gd.on("plotly_click", (ev) => {
          const p = ev.points && ev.points[0];
          if (p && p.data.meta !== "stages" && typeof p.customdata === "string") selectRegion(p.customdata, { reveal: true });
        });
      }
    }
    if (selection) highlight(selection.regions);
  }

  document.getElementById("source").addEventListener("click", (ev) => {
    const row = ev.target.closest(".ln");
    if (row) selectLine(row.dataset.file, Number(row.dataset.line), { reveal: true, noScroll: true });
  });
  document.getElementById("details").addEventListener("click", (ev) => {
    const link = ev.target.closest(".src-link");
    if (link) selectLine(link.dataset.file, Number(link.dataset.line), { reveal: true });
  });
  const picker = document.getElementById("plan");
  picker.addEventListener("change", () => setPlan(picker.value));
  for (const b of $$(".graph-tools button")) {
    b.addEventListener("click", () => ({ expand: () => graph.expandAll(), collapse: () => graph.collapseAll(),
      fit: () => graph.fit() })[b.dataset.graph]());
  }

  // A target of the file: its header, its source, its plans; the default plan first.
  function setTarget(index) {
    target = page.targets[index];
    $("#target").value = String(index);
    $("#target-name").textContent = target.name;
    $("#target-where").textContent = target.where;
    $("#target-head").replaceChildren(document.getElementById("head-" + index).content.cloneNode(true));
    $("#source").replaceChildren(document.getElementById("source-" + index).content.cloneNode(true));
    $("#target-error").hidden = !target.error;
    $("#target-error").textContent = target.error || "";
    $("#main").hidden = !!target.error;
    $(".plan-bar").hidden = !!target.error;
    if (target.error) return;
    data = target.data;
    picker.replaceChildren(...data.plans.map((p) => {
      const o = el("option", null, p.label);
      o.value = p.key;
      return o;
    }));
    setPlan(data.default);
  }
  $("#target").addEventListener("change", () => setTarget(Number($("#target").value)));
  window.addEventListener("message", (ev) => {
    const m = ev.data;
    if (m && m.type === "cursor" && typeof m.file === "string" && Number.isInteger(m.line)) selectLine(m.file, m.line);
  });
  window.fusionlens = {
    selectLine: (file, line) => selectLine(file, line),
    selectRegion: (id) => selectRegion(id),
    selected: () => selection,
    plan: () => plan.key,
    setPlan: (key) => setPlan(key),
    target: () => target.name,
    setTarget: (name) => setTarget(page.targets.findIndex((t) => t.name === name)),
    graph: () => graph,
  };
  graph = FusionGraph.create(document.getElementById("fusion-graph"), (id) => selectRegion(id, { reveal: true }));
  setTarget(page.first);
  // ms from the navigation's start: the source and the graph drawn, then the charts too
  window.fusionlens.drawnAt = performance.now();
  // after the first paint: plotly.js, then the charts
  requestAnimationFrame(() => setTimeout(() => {
    loadPlotly();
    drawCharts();
    window.fusionlens.chartsAt = performance.now();
  }, 0));
  // VS Code sets the theme's class and variables when the webview loads and when the user switches
  // themes: redraw then, keeping the selection
  let dark = isDark();
  new MutationObserver(() => {
    if (isDark() === dark) return;
    dark = isDark();
    drawCharts(); // the graph is drawn in the page's CSS variables: it keeps its open groups as they are
  }).observe(document.body, { attributes: true, attributeFilter: ["class"] });
})();
