/* nlq2sql view: runs, items, one item, comparison — drawn from run records.
 *
 * Every recorded string (questions, model output, ids, manifest values) reaches the page
 * through textContent / text nodes / setAttribute on inert attributes, never as markup
 * (with bidi controls shown as ⟨U+XXXX⟩, see marked()):
 * the page's policy (require-trusted-types-for 'script') makes innerHTML with a string
 * throw, and this file never uses it.  Data arrives as data/*.js files that call
 * __nlq2sql_load(name, payload); only names matching DATA_NAME can be loaded.
 */
"use strict";
(function () {
  const DATA_NAME = /^r\d+-(index|c\d+)$/;
  const PAGE = 100;
  const DIFF_PAGE = 10;
  const FIELDS = ["intent", "metric", "dimension", "time_grain", "filters", "limit", "order"];

  // ------------------------------------------------------------------ data loading
  let policy = null;
  if (window.trustedTypes && window.trustedTypes.createPolicy) {
    policy = window.trustedTypes.createPolicy("nlq2sql", {
      createScriptURL: function (u) {
        if (/^data\/r\d+-(index|c\d+)\.js$/.test(u)) return u;
        throw new TypeError("refused script URL");
      },
    });
  }
  const store = Object.create(null);
  const waiting = Object.create(null);
  window.__nlq2sql_load = function (name, payload) {
    if (typeof name !== "string" || (name !== "meta" && !DATA_NAME.test(name))) return;
    let value;
    try { value = typeof payload === "string" ? JSON.parse(payload) : null; } catch (e) { value = null; }
    const w = waiting[name] || [];
    if (value === null) {
      delete waiting[name];
      w.forEach(function (f) { f.reject(new Error("data " + name + " is not valid JSON")); });
      return;
    }
    store[name] = value;
    delete waiting[name];
    w.forEach(function (f) { f.resolve(value); });
  };

  function load(name) {
    if (store[name]) return Promise.resolve(store[name]);
    if (!DATA_NAME.test(name)) return Promise.reject(new Error("bad data name"));
    return new Promise(function (resolve, reject) {
      if (waiting[name]) { waiting[name].push({ resolve: resolve, reject: reject }); return; }
      waiting[name] = [{ resolve: resolve, reject: reject }];
      const url = "data/" + name + ".js";
      const s = document.createElement("script");
      s.addEventListener("error", function () {
        const w = waiting[name] || [];
        delete waiting[name];
        w.forEach(function (f) { f.reject(new Error("could not load " + url)); });
      });
      s.src = policy ? policy.createScriptURL(url) : url;
      document.head.appendChild(s);
    });
  }
  const index = function (k) { return load("r" + k + "-index"); };

  // ------------------------------------------------------------------ DOM helpers
  function h(tag, attrs) {
    const el = document.createElement(tag);
    setAttrs(el, attrs);
    for (let i = 2; i < arguments.length; i++) add(el, arguments[i]);
    return el;
  }
  function svg(tag, attrs) {
    const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
    setAttrs(el, attrs);
    for (let i = 2; i < arguments.length; i++) add(el, arguments[i]);
    return el;
  }
  /* Bidi controls reorder the text around them ("\u202egnp.exe" reads "exe.png"), so none reaches
     the page as such: each is shown as its code point, ⟨U+202E⟩.  Applied to every text and title. */
  const BIDI = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
  function marked(s) {
    return String(s).replace(BIDI, function (c) { return "⟨U+" + c.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0") + "⟩"; });
  }
  function setAttrs(el, attrs) {
    if (!attrs) return;
    Object.keys(attrs).forEach(function (k) {
      const v = attrs[k];
      if (v === null || v === undefined || v === false) return;
      if (k === "class") el.setAttribute("class", v);
      else if (k === "text") el.textContent = marked(v);
      else if (k === "title") el.setAttribute("title", marked(v));
      else if (k.slice(0, 2) === "on") el.addEventListener(k.slice(2), v);
      else if (k === "href") el.setAttribute("href", "#" + String(v).replace(/^#/, ""));
      else if (k === "rawhref") el.setAttribute("href", String(v));
      else el.setAttribute(k, v === true ? "" : String(v));
    });
  }
  function add(el, c) {
    if (c === null || c === undefined || c === false) return;
    if (Array.isArray(c)) { c.forEach(function (x) { add(el, x); }); return; }
    el.append(c instanceof Node ? c : marked(c));
  }
  function clear(el) { while (el.firstChild) el.removeChild(el.firstChild); return el; }
  function app() { return document.getElementById("app"); }

  // ------------------------------------------------------------------ formatting
  function str(v) {
    if (v === null || v === undefined) return "—";
    if (typeof v === "string") return v;
    return JSON.stringify(v);
  }
  /* One decimal as Python's format writes it, so figures read as in the terminal report: both
     round the double's exact value (toFixed does), and Python breaks an exact tie -- possible only
     for a multiple of 0.25 -- to even, where toFixed goes up.  (35.85 is not a tie: its double
     is a little above, so both write 35.9.) */
  function fixed1(x) {
    const y = x * 10;
    if (Number.isInteger(x * 4) && Math.abs(y % 1) === 0.5) {
      const f = Math.floor(y);
      return ((f % 2 === 0 ? f : f + 1) / 10).toFixed(1);
    }
    return x.toFixed(1);
  }
  function pct(p) {
    if (!p || typeof p !== "object") return "n/a";
    if (p.value === null || p.value === undefined) return "n/a (0 samples)";
    const ci = Array.isArray(p.ci95) ? " [" + fixed1(100 * p.ci95[0]) + "–" + fixed1(100 * p.ci95[1]) + "]" : "";
    return fixed1(100 * p.value) + " %" + ci + " (" + p.k + "/" + p.n + ")";
  }
  function secs(v, digits) {
    return typeof v === "number" && isFinite(v) ? v.toFixed(digits === undefined ? 2 : digits) + " s" : "n/a";
  }
  function num(v) { return typeof v === "number" && isFinite(v) ? String(v) : "n/a"; }
  function when(ts) {
    if (typeof ts !== "number" || !isFinite(ts)) return "—";
    try { return new Date(ts * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC"; } catch (e) { return String(ts); }
  }
  function pval(p) {
    if (typeof p !== "number") return "n/a";
    return p >= 1e-4 ? p.toFixed(4) : p.toExponential(2);
  }
  function mark(ok) { return h("span", { class: ok ? "ok" : "bad", text: ok ? "✓" : "✗" }); }
  function statusTag(s) { return h("span", { class: "tag " + (s === "ok" ? "tag-ok" : "tag-bad"), text: str(s) }); }

  /* Raw text with its whitespace made visible: each whitespace character becomes a marked glyph. */
  const WS = { " ": "·", "\t": "→", "\n": "↵", "\r": "␍" };
  function visibleText(text) {
    const frag = document.createDocumentFragment();
    if (typeof text !== "string") { frag.append(h("span", { class: "muted", text: "(no text recorded)" })); return frag; }
    let buf = "";
    const flush = function () { if (buf) { frag.append(marked(buf)); buf = ""; } };
    for (const ch of text) {
      if (/\s/.test(ch)) {
        flush();
        const glyph = WS[ch] || "⍽";
        const title = ch === " " ? "space" : ch === "\t" ? "tab" : ch === "\n" ? "newline" : ch === "\r" ? "carriage return"
          : "U+" + ch.codePointAt(0).toString(16).toUpperCase().padStart(4, "0");
        frag.append(h("span", { class: "ws", title: title, text: glyph }));
        if (ch === "\n") frag.append("\n");
      } else buf += ch;
    }
    flush();
    return frag;
  }
  function countWhitespace(text) {
    let n = 0;
    if (typeof text === "string") for (const ch of text) if (/\s/.test(ch)) n++;
    return n;
  }

  // ------------------------------------------------------------------ routing
  function meta() { return store.meta; }
  function runs() { return meta().runs; }
  function runLabel(k) { const r = runs()[k]; return r ? "#" + k + " " + r.label : "run " + k; }
  /* Links name a run by its id (its folder's shortest unique tail), not by its place among the
     viewer's arguments, so a link opens the same run when the viewer is started on other runs.
     A plain number that is no run's id is read as a place (links made before ids). */
  function runRef(k) { const r = runs()[k]; return encodeURIComponent(r && typeof r.id === "string" ? r.id : String(k)); }
  function runKey(ref) {
    const rs = runs();
    for (let i = 0; i < rs.length; i++) if (rs[i].id === ref) return i;
    if (/^\d{1,9}$/.test(ref || "")) { const k = parseInt(ref, 10); if (k < rs.length) return k; }
    return -1;
  }
  function itemsHref(k) { return "items/" + runRef(k); }
  function itemHref(k, pos) { return "item/" + runRef(k) + "/" + pos; }
  function parseHash() {
    const raw = location.hash.replace(/^#/, "");
    const q = raw.indexOf("?");
    const path = q >= 0 ? raw.slice(0, q) : raw;
    const params = new URLSearchParams(q >= 0 ? raw.slice(q + 1) : "");
    const decode = function (p) { try { return decodeURIComponent(p); } catch (e) { return p; } };
    const segs = path.split("/");
    const parts = segs.map(decode);
    return { view: parts[0] || "runs", parts: parts.slice(1), raw: segs.slice(1), decode: decode, params: params };
  }
  function setNav(view) {
    ["runs", "items", "compare"].forEach(function (v) {
      const a = document.getElementById("nav-" + v);
      if (a) a.setAttribute("class", v === view || (v === "items" && view === "item") ? "active" : "");
    });
  }
  let renderToken = 0;
  function render() {
    const token = ++renderToken;
    const route = parseHash();
    setNav(route.view);
    const root = clear(app());
    const still = function () { return token === renderToken; };
    let done;
    try {
      if (route.view === "items") done = renderItems(root, route, still);
      else if (route.view === "item") done = renderItem(root, route, still);
      else if (route.view === "compare") done = renderCompare(root, route, still);
      else done = renderRuns(root, still);
    } catch (e) { done = Promise.reject(e); }
    Promise.resolve(done).then(function () {
      if (still()) document.body.setAttribute("data-ready", route.view);
    }, function (e) {
      if (!still()) return;
      root.append(h("p", { class: "error", id: "page-error", text: "Could not show this page: " + (e && e.message ? e.message : String(e)) }));
      document.body.setAttribute("data-ready", "error");
    });
  }

  // ------------------------------------------------------------------ runs
  // What the model was shown and how it was asked, from the manifest (docs/conditions.md).
  function conditions(f, s) {
    const parts = ["schema " + (s.schema ? str(s.schema) : "flat")];
    if (f.examples && typeof f.examples === "object") parts.push(str(f.examples.k) + " examples (" + str(f.examples.bank) + ")");
    if (f.link_values && f.link_values !== "none") parts.push("values " + str(f.link_values));
    if (f.planner && f.planner !== "none") parts.push("planner " + str(f.planner));
    if (typeof f.samples === "number" && f.samples > 1) parts.push(f.samples + " samples");
    if (f.abstain) parts.push("abstain");
    return parts.join(" · ");
  }

  function renderRuns(root, still) {
    const rs = runs();
    root.append(h("h1", { text: "Runs" }),
      h("p", { class: "muted", title: "page made " + meta().generated, text: rs.length + " run" + (rs.length === 1 ? "" : "s") }));
    const skipped = Array.isArray(meta().skipped) ? meta().skipped : [];
    if (skipped.length) {
      root.append(h("div", { id: "runs-skipped", class: "note" },
        h("p", { text: skipped.length + " folder" + (skipped.length === 1 ? "" : "s") + " below the given ones could not be read and " +
          (skipped.length === 1 ? "is" : "are") + " not shown:" }),
        h("ul", null, skipped.map(function (n) { return h("li", { text: n }); }))));
    }
    const facts = h("table", { class: "grid", id: "runs-facts" },
      h("thead", null, h("tr", null, ["#", "run", "model", "prompt", "guardrails", "eval set", "sampling", "concurrency",
        "client", "server", "when", "commit", "warehouse", "conditions"].map(function (t) { return h("th", { text: t }); }))));
    const tb = h("tbody");
    rs.forEach(function (r) {
      const f = r.facts;
      const s = f.sampling && typeof f.sampling === "object" ? f.sampling : {};
      const server = [f.server_version ? "vLLM " + str(f.server_version) : null, f.endpoint ? str(f.endpoint) : null,
        f.max_model_len ? "max_model_len " + str(f.max_model_len) : null].filter(Boolean).join(" · ");
      const dur = typeof f.started === "number" && typeof f.finished === "number" ? " (" + secs(f.finished - f.started, 0) + ")" : "";
      const links = h("div", { class: "small" }, h("a", { href: itemsHref(r.key), text: "items" }));
      if (meta().raw_files) r.files.forEach(function (name) {
        links.append(" · ", h("a", { rawhref: "runs/" + r.key + "/" + encodeURIComponent(name), text: name }));
      });
      tb.append(h("tr", { "data-run": r.key },
        h("td", { text: r.key }),
        h("td", null, h("div", { text: r.name }), h("div", { class: "small muted", text: r.dir }), links,
          r.notes.map(function (n) { return h("div", { class: "note", text: n }); }),
          h("details", { class: "small" }, h("summary", { text: "manifest" }), h("pre", { class: "json", text: JSON.stringify(r.manifest, null, 2) }))),
        h("td", { text: str(f.model) }),
        h("td", { text: str(f.prompt) + (f.prompt_style && f.prompt_style !== "default" ? " (" + str(f.prompt_style) + ")" : "") }),
        h("td", { text: Array.isArray(f.guardrails) && f.guardrails.length ? f.guardrails.map(str).join(", ") : "none" }),
        h("td", { text: str(f.evalset) + " (" + r.n + " items" + (typeof f.limit === "number" ? "; --limit " + f.limit + " of " + str(f.n_items)
          : typeof f.n_items === "number" && f.n_items !== r.n ? " of " + f.n_items : "") + ")" }),
        h("td", { text: "max_tokens " + str(s.max_tokens) + " · T " + str(s.temperature) + " · " + str(s.structured) }),
        h("td", { text: str(f.concurrency) }),
        h("td", { text: f.client === undefined || f.client === null ? "not recorded" : str(f.client) }),
        h("td", { text: server || "—" }),
        h("td", { text: when(f.started) + dur }),
        h("td", { class: "small", text: (typeof f.git_commit === "string" ? f.git_commit.slice(0, 10) : "—") + (f.git_dirty ? " (dirty)" : "") }),
        h("td", { text: f.semantic_model ? str(f.semantic_model) : "retail (not recorded)" }),
        h("td", { class: "small", text: conditions(f, s) })));
    });
    facts.append(tb);
    root.append(h("h2", { text: "What ran" }), h("div", { class: "scroll" }, facts));

    const head = h("table", { class: "grid", id: "runs-headline" },
      h("thead", null, h("tr", null, ["#", "n", "raw accuracy", "final accuracy", "execution accuracy", "schema-valid",
        "interventions (precision)", "latency p50 / p95", "TTFT p50", "req/s", "errors (final)"].map(function (t) { return h("th", { text: t }); }))));
    const hb = h("tbody");
    rs.forEach(function (r) {
      const s = r.summary || {};
      const t = s.timing || {};
      const lat = t.latency_s || {};
      const ttft = t.ttft_s || {};
      const rps = s.throughput && typeof s.throughput.req_per_s === "number" ? s.throughput.req_per_s.toFixed(2) : "n/a";
      const errs = s.error_taxonomy_final && typeof s.error_taxonomy_final === "object"
        ? Object.keys(s.error_taxonomy_final).map(function (k) { return k + " " + s.error_taxonomy_final[k]; }).join(", ") : "—";
      hb.append(h("tr", { "data-run": r.key },
        h("td", { text: r.key }), h("td", { text: str(s.n) }),
        h("td", { class: "num", text: pct(s.raw_accuracy) }), h("td", { class: "num", text: pct(s.final_accuracy) }),
        h("td", { class: "num", text: pct(s.execution_accuracy) }), h("td", { class: "num", text: pct(s.schema_valid_rate) }),
        h("td", { class: "num", text: str(s.interventions) + " (" + pct(s.intervention_precision) + ")" }),
        h("td", { class: "num", text: secs(lat.p50) + " / " + secs(lat.p95) + " (n=" + num(lat.n) + ")" }),
        h("td", { class: "num", text: secs(ttft.p50) }), h("td", { class: "num", text: rps }),
        h("td", { class: "small", text: errs })));
    });
    head.append(hb);
    root.append(h("h2", { text: "Headline figures (95 % Wilson CI, k/n)" }), h("div", { class: "scroll" }, head));
    root.append(h("h2", { text: "Accuracy by run" }), accuracyPlot(rs));
    const latBox = h("div", { id: "latency-plot" }, h("p", { class: "muted", text: "loading latencies…" }));
    root.append(h("h2", { text: "Latency distribution (e2e, per item)" }), latBox);
    return Promise.all(rs.map(function (r) { return index(r.key); })).then(function (ixs) {
      if (!still()) return;
      clear(latBox).append(latencyPlot(rs, ixs));
    });
  }

  // ------------------------------------------------------------------ plots (inline SVG)
  function accuracyPlot(rs) {
    const rowH = 34, left = 300, width = 900, plotW = width - left - 30, top = 24;
    const height = top + rowH * rs.length + 40;
    const g = svg("svg", { class: "plot", id: "accuracy-plot", viewBox: "0 0 " + width + " " + height, width: width, height: height, role: "img" });
    g.append(svg("title", { text: "Raw and final accuracy per run with 95 % Wilson intervals" }));
    const x = function (v) { return left + v * plotW; };
    [0, 0.25, 0.5, 0.75, 1].forEach(function (v) {
      g.append(svg("line", { x1: x(v), x2: x(v), y1: top - 6, y2: height - 34, class: "gridline" }),
        svg("text", { x: x(v), y: height - 18, "text-anchor": "middle", class: "axis", text: (v * 100) + " %" }));
    });
    rs.forEach(function (r, i) {
      const y = top + i * rowH + rowH / 2;
      g.append(svg("text", { x: left - 8, y: y + 4, "text-anchor": "end", class: "axis", text: clip("#" + r.key + " " + r.label, 46) },
        svg("title", { text: "#" + r.key + " " + r.label })));  // the whole label on hover: a long name is clipped
      [["raw_accuracy", -6, "raw"], ["final_accuracy", 6, "final"]].forEach(function (spec) {
        const p = (r.summary || {})[spec[0]];
        if (!p || typeof p.value !== "number") return;
        const cy = y + spec[1];
        if (Array.isArray(p.ci95)) g.append(svg("line", { x1: x(p.ci95[0]), x2: x(p.ci95[1]), y1: cy, y2: cy, class: "ci ci-" + spec[2] }));
        g.append(svg("circle", { cx: x(p.value), cy: cy, r: 4, class: "pt pt-" + spec[2] },
          svg("title", { text: spec[2] + " accuracy " + pct(p) })));
      });
    });
    g.append(svg("circle", { cx: left, cy: height - 6, r: 4, class: "pt pt-raw" }),
      svg("text", { x: left + 8, y: height - 2, class: "axis", text: "raw intent" }),
      svg("circle", { cx: left + 100, cy: height - 6, r: 4, class: "pt pt-final" }),
      svg("text", { x: left + 108, y: height - 2, class: "axis", text: "final (after guardrail); bars: 95 % Wilson CI" }));
    return g;
  }
  function clip(s, n) { s = String(s); return s.length > n ? s.slice(0, n - 1) + "…" : s; }

  function latencyPlot(rs, ixs) {
    let max = 0;
    ixs.forEach(function (ix) { ix.latency_s.forEach(function (v) { if (typeof v === "number" && v > max) max = v; }); });
    const bins = 24, width = 900, rowH = 70, left = 300, plotW = width - left - 30;
    const height = rowH * rs.length + 40;
    const g = svg("svg", { class: "plot", id: "latency-svg", viewBox: "0 0 " + width + " " + height, width: width, height: height, role: "img" });
    g.append(svg("title", { text: "Histogram of per-item end-to-end latency per run" }));
    if (!(max > 0)) { g.append(svg("text", { x: 10, y: 20, class: "axis", text: "no latencies recorded" })); return g; }
    const step = max / bins;
    rs.forEach(function (r, i) {
      const counts = new Array(bins).fill(0);
      let n = 0;
      ixs[i].latency_s.forEach(function (v) {
        if (typeof v !== "number") return;
        n++;
        counts[Math.min(bins - 1, Math.floor(v / step))]++;
      });
      const peak = Math.max.apply(null, counts.concat([1]));
      const y0 = i * rowH + rowH - 8;
      g.append(svg("text", { x: left - 8, y: y0 - 20, "text-anchor": "end", class: "axis", text: clip("#" + r.key + " " + r.label, 46) },
        svg("title", { text: "#" + r.key + " " + r.label })),
        svg("text", { x: left - 8, y: y0 - 6, "text-anchor": "end", class: "axis muted", text: "n=" + n }),
        svg("line", { x1: left, x2: left + plotW, y1: y0, y2: y0, class: "gridline" }));
      counts.forEach(function (c, b) {
        if (!c) return;
        const bh = (rowH - 16) * c / peak;
        g.append(svg("rect", { x: left + b * plotW / bins + 1, y: y0 - bh, width: plotW / bins - 2, height: bh, class: "bar" },
          svg("title", { text: c + " items in " + (b * step).toFixed(1) + "–" + ((b + 1) * step).toFixed(1) + " s" })));
      });
    });
    for (let t = 0; t <= 4; t++) {
      const v = max * t / 4;
      g.append(svg("text", { x: left + plotW * t / 4, y: height - 14, "text-anchor": "middle", class: "axis", text: v.toFixed(1) + " s" }));
    }
    return g;
  }

  // ------------------------------------------------------------------ items
  const itemsState = { run: null, ix: null, lower: null };
  function distinct(col) {
    const c = new Map();
    col.forEach(function (v) { const k = v === null ? "(none)" : v; c.set(k, (c.get(k) || 0) + 1); });
    return Array.from(c.entries()).sort(function (a, b) { return b[1] - a[1] || (a[0] < b[0] ? -1 : 1); });
  }
  const COLS = [
    ["pos", "#"], ["id", "id"], ["question", "question"], ["category", "category"], ["status", "status"],
    ["error_raw", "error (raw)"], ["error_final", "error (final)"], ["correct_raw", "raw"], ["correct_final", "final"],
    ["correct_exec", "exec"], ["latency_s", "latency"], ["completion_tokens", "tokens"], ["interventions", "interventions"]];
  const FILTERS = [["status", "status"], ["error_raw", "error (raw)"], ["error_final", "error (final)"], ["category", "category"]];

  function renderItems(root, route, still) {
    const rs = runs();
    let k = route.parts.length ? runKey(route.parts[0]) : 0;
    if (!(k >= 0 && k < rs.length)) k = 0;
    const p = route.params;
    return index(k).then(function (ix) {
      if (!still()) return;
      itemsState.run = k; itemsState.ix = ix; itemsState.lower = null;
      const runSel = h("select", { id: "run-select", onchange: function () { location.hash = itemsHref(Number(runSel.value)); } },
        rs.map(function (r) { return h("option", { value: r.key, selected: r.key === k, text: runLabel(r.key) }); }));
      root.append(h("h1", { text: "Items" }), h("label", null, "run ", runSel));
      const controls = h("div", { class: "controls" });
      const inputs = {};
      FILTERS.forEach(function (f) {
        const sel = h("select", { id: "filter-" + f[0], "data-filter": f[0] },
          h("option", { value: "", text: "any " + f[1] }),
          distinct(ix[f[0]]).map(function (e) { return h("option", { value: e[0], text: e[0] + " (" + e[1] + ")" }); }));
        sel.value = p.get(f[0]) || "";
        inputs[f[0]] = sel;
        controls.append(h("label", null, f[1] + " ", sel));
      });
      const iv = h("select", { id: "filter-iv" }, h("option", { value: "", text: "any" }),
        h("option", { value: "yes", text: "fired" }), h("option", { value: "no", text: "not fired" }));
      iv.value = p.get("iv") || "";
      inputs.iv = iv;
      const ok = h("select", { id: "filter-ok" }, h("option", { value: "", text: "any" }),
        h("option", { value: "yes", text: "right" }), h("option", { value: "no", text: "wrong" }));
      ok.value = p.get("ok") || "";
      inputs.ok = ok;
      const q = h("input", { id: "filter-q", type: "search", placeholder: "text in question or id", size: 28 });
      q.value = p.get("q") || "";
      inputs.q = q;
      controls.append(h("label", null, "intervention ", iv), h("label", null, "final ", ok), h("label", null, "search ", q),
        h("button", { id: "filter-reset", type: "button", text: "reset", onclick: function () {
          Object.keys(inputs).forEach(function (key) { inputs[key].value = ""; });
          state.page = 0; update();
        } }));
      root.append(controls);
      const countLine = h("p", { id: "match-count", class: "muted" });
      const pager = h("div", { class: "pager" });
      const table = h("table", { class: "grid items", id: "items-table" });
      const thead = h("thead");
      const tbody = h("tbody");
      table.append(thead, tbody);
      root.append(countLine, pager, h("div", { class: "scroll" }, table));
      const state = { sort: p.get("sort") || "pos", dir: p.get("dir") === "desc" ? -1 : 1, page: Math.max(0, parseInt(p.get("page") || "1", 10) - 1 || 0) };

      function headers() {
        clear(thead).append(h("tr", null, COLS.map(function (c) {
          const arrow = state.sort === c[0] ? (state.dir > 0 ? " ▲" : " ▼") : "";
          return h("th", { class: "sortable", "data-col": c[0], text: c[1] + arrow, onclick: function () {
            if (state.sort === c[0]) state.dir = -state.dir; else { state.sort = c[0]; state.dir = 1; }
            state.page = 0; update();
          } });
        })));
      }
      let timer = null;
      q.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(function () { state.page = 0; update(); }, 150); });
      Object.keys(inputs).forEach(function (key) { if (key !== "q") inputs[key].addEventListener("change", function () { state.page = 0; update(); }); });

      function update() {
        const t0 = performance.now();
        const rows = filterRows(ix, {
          status: inputs.status.value, error_raw: inputs.error_raw.value, error_final: inputs.error_final.value,
          category: inputs.category.value, iv: inputs.iv.value, ok: inputs.ok.value, q: inputs.q.value });
        sortRows(ix, rows, state.sort, state.dir);
        const pages = Math.max(1, Math.ceil(rows.length / PAGE));
        if (state.page >= pages) state.page = pages - 1;
        const start = state.page * PAGE;
        const shown = rows.slice(start, start + PAGE);
        countLine.setAttribute("data-count", rows.length);
        countLine.setAttribute("data-total", ix.id.length);
        countLine.textContent = rows.length + " of " + ix.id.length + " items match" +
          (rows.length ? " · showing " + (start + 1) + "–" + (start + shown.length) : "");
        clear(pager).append(
          h("button", { type: "button", id: "page-prev", disabled: state.page === 0, text: "‹ prev", onclick: function () { state.page--; update(); } }),
          h("span", { id: "page-info", text: " page " + (state.page + 1) + " of " + pages + " " }),
          h("button", { type: "button", id: "page-next", disabled: state.page >= pages - 1, text: "next ›", onclick: function () { state.page++; update(); } }));
        headers();
        clear(tbody);
        const frag = document.createDocumentFragment();
        shown.forEach(function (i) { frag.append(itemRow(k, ix, i)); });
        tbody.append(frag);
        countLine.setAttribute("data-ms", Math.round(performance.now() - t0));
        const params = new URLSearchParams();
        FILTERS.forEach(function (f) { if (inputs[f[0]].value) params.set(f[0], inputs[f[0]].value); });
        ["iv", "ok", "q"].forEach(function (key) { if (inputs[key].value) params.set(key, inputs[key].value); });
        if (state.sort !== "pos") params.set("sort", state.sort);
        if (state.dir < 0) params.set("dir", "desc");
        if (state.page) params.set("page", state.page + 1);
        const qs = params.toString();
        history.replaceState(null, "", "#" + itemsHref(k) + (qs ? "?" + qs : ""));
      }
      update();
    });
  }
  function filterRows(ix, f) {
    const n = ix.id.length;
    const out = [];
    const needle = f.q ? f.q.toLowerCase() : "";
    if (needle && !itemsState.lower) {
      itemsState.lower = ix.question.map(function (qq, i) { return (qq + "\u0000" + ix.id[i]).toLowerCase(); });
    }
    const eq = function (col, want) { if (!want) return null; const c = ix[col]; return function (i) { return (c[i] === null ? "(none)" : c[i]) === want; }; };
    const tests = [eq("status", f.status), eq("error_raw", f.error_raw), eq("error_final", f.error_final), eq("category", f.category)]
      .filter(Boolean);
    if (f.iv) tests.push(f.iv === "yes" ? function (i) { return ix.interventions[i] > 0; } : function (i) { return !ix.interventions[i]; });
    if (f.ok) tests.push(f.ok === "yes" ? function (i) { return ix.correct_final[i] === 1; } : function (i) { return ix.correct_final[i] !== 1; });
    if (needle) { const low = itemsState.lower; tests.push(function (i) { return low[i].indexOf(needle) >= 0; }); }
    outer: for (let i = 0; i < n; i++) {
      for (let t = 0; t < tests.length; t++) if (!tests[t](i)) continue outer;
      out.push(i);
    }
    return out;
  }
  function sortRows(ix, rows, col, dir) {
    if (col === "pos") { if (dir < 0) rows.reverse(); return; }
    const c = ix[col];
    if (!c) return;
    rows.sort(function (a, b) {
      const x = c[a], y = c[b];
      if (x === y) return a - b;
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      return (x < y ? -1 : 1) * dir;
    });
  }
  function itemRow(k, ix, i) {
    return h("tr", { "data-pos": i },
      h("td", { class: "num", text: i + 1 }),
      h("td", null, h("a", { href: itemHref(k, i), class: "item-link", text: ix.id[i] })),
      h("td", { class: "question", title: ix.question[i], text: ix.question[i] }),
      h("td", { text: ix.category[i] }),
      h("td", null, statusTag(ix.status[i])),
      h("td", { text: str(ix.error_raw[i]) }), h("td", { text: str(ix.error_final[i]) }),
      h("td", null, mark(ix.correct_raw[i])), h("td", null, mark(ix.correct_final[i])), h("td", null, mark(ix.correct_exec[i])),
      h("td", { class: "num", text: secs(ix.latency_s[i]) }), h("td", { class: "num", text: num(ix.completion_tokens[i]) }),
      h("td", { class: "num", text: ix.interventions[i] || "" }));
  }

  // ------------------------------------------------------------------ one item
  function renderItem(root, route, still) {
    const rs = runs();
    // a link names run and position as plain decimals; anything else (or out of range) is no item
    const whole = function (p) { return /^\d{1,9}$/.test(p || "") ? parseInt(p, 10) : -1; };
    const k = runKey(route.parts[0]);
    const pos = whole(route.parts[1]);
    const asked = "#item/" + route.parts.join("/");
    if (!(k >= 0 && k < rs.length) || route.parts.length !== 2) {
      throw new Error("no such item: " + asked + " (a link is #item/RUN/POSITION; runs are #0 to #" + (rs.length - 1) + ")");
    }
    const size = meta().chunk_size;
    return index(k).then(function (ix) {
      if (!(pos >= 0 && pos < ix.id.length)) {
        throw new Error("no such item: " + asked + " (run #" + k + " has " + ix.id.length + " items, positions 0 to " + (ix.id.length - 1) + ")");
      }
      return Promise.all([ix, load("r" + k + "-c" + Math.floor(pos / size))]);
    }).then(function (res) {
      if (!still()) return;
      const ix = res[0], chunk = res[1];
      const rec = chunk.records[pos % size];
      const cues = chunk.cues[String(pos % size)] || null;
      const run = rs[k];
      const nav = h("p", { class: "crumbs" }, h("a", { href: "runs", text: "Runs" }), " › ",
        h("a", { href: itemsHref(k), text: runLabel(k) }), " › ", h("span", { text: str(rec.id) }), "  ",
        pos > 0 ? h("a", { href: itemHref(k, pos - 1), id: "item-prev", text: "‹ previous" }) : null, " ",
        pos < ix.id.length - 1 ? h("a", { href: itemHref(k, pos + 1), id: "item-next", text: "next ›" }) : null);
      root.append(nav);
      root.append(h("h1", { id: "item-id", text: str(rec.id) }),
        h("blockquote", { id: "item-question", text: str(rec.question) }),
        h("p", { class: "muted", text: "category " + str(rec.category) + " · pair " + str(rec.pair_id) + " · item " + (pos + 1) + " of " + ix.id.length + " in run #" + k }));
      const others = rs.filter(function (r) { return r.key !== k && r.evalset_key === run.evalset_key; });
      if (others.length) {
        const line = h("p", { class: "small", id: "item-other-runs" }, "Same item in: ");
        root.append(line);
        Promise.all(others.map(function (r) { return index(r.key); })).then(function (oxs) {
          oxs.forEach(function (ox, j) {
            const at = ox.id.indexOf(String(rec.id));
            if (at >= 0) line.append(h("a", { href: itemHref(others[j].key, at), text: runLabel(others[j].key) }), h("span", null, " ", mark(ox.correct_final[at])), "  ");
          });
        });
      }
      // verdict
      const verdict = h("table", { class: "kv", id: "item-verdict" });
      const kv = function (t, key, val) { t.append(h("tr", null, h("th", { text: key }), h("td", null, val))); };
      kv(verdict, "status (raw)", [statusTag(rec.status), rec.status_reason ? " " + str(rec.status_reason) : ""]);
      kv(verdict, "status (final)", [statusTag(rec.final_status), rec.final_status_reason ? " " + str(rec.final_status_reason) : ""]);
      kv(verdict, "error class raw / final", str(rec.error_raw) + " / " + str(rec.error_final));
      kv(verdict, "correct raw / final / execution", [mark(rec.correct_raw === true), " ", mark(rec.correct_final === true), " ", mark(rec.correct_exec === true)]);
      kv(verdict, "request", "outcome " + str(rec.outcome) + " · HTTP " + str(rec.http_status) + " · attempts " + str(rec.attempts) +
        " · finish " + str(rec.finish_reason) + (rec.error ? " · error " + str(rec.error) : ""));
      root.append(h("h2", { text: "Verdict" }), verdict);

      // raw text
      const raw = rec.raw_text;
      root.append(h("h2", { text: "Raw model text" }),
        h("p", { class: "small muted" }, "Whitespace made visible: ", h("span", { class: "ws", text: "·" }), " space, ",
          h("span", { class: "ws", text: "→" }), " tab, ", h("span", { class: "ws", text: "↵" }), " newline, ",
          h("span", { class: "ws", text: "⍽" }), " other. ",
          typeof raw === "string" ? Array.from(raw).length + " characters, " + countWhitespace(raw) + " whitespace" +
            (typeof rec.whitespace_chars === "number" ? " (" + rec.whitespace_chars + " outside JSON strings, as recorded)" : "") : ""),
        h("pre", { class: "raw", id: "item-raw" }, visibleText(raw)));

      // intents
      const tbl = h("table", { class: "grid intents", id: "item-intents" },
        h("thead", null, h("tr", null, h("th", { text: "field" }), h("th", { text: "raw" }), h("th", { text: "final (after guardrail)" }), h("th", { text: "gold" }))));
      const ib = h("tbody");
      const gold = rec.gold_intent && typeof rec.gold_intent === "object" ? rec.gold_intent : null;
      const cell = function (intent, fld, which) {
        if (!intent || typeof intent !== "object") return h("td", { class: "muted", text: which === "gold" ? "—" : "(no intent)" });
        const v = intent[fld];
        const differs = which !== "gold" && gold && JSON.stringify(v) !== JSON.stringify(gold[fld]);
        return h("td", { class: differs ? "differs" : null, "data-differs": differs ? "1" : null },
          differs ? h("span", { class: "neq", title: "differs from gold", text: "≠ " }) : null, h("code", { text: str(v) }));
      };
      FIELDS.forEach(function (fld) {
        ib.append(h("tr", { "data-field": fld }, h("th", { text: fld }), cell(rec.raw_intent, fld, "raw"), cell(rec.final_intent, fld, "final"), cell(gold, fld, "gold")));
      });
      tbl.append(ib);
      root.append(h("h2", { text: "Intent: raw, final and gold" }),
        h("p", { class: "small muted", text: "≠ marks a field that differs from gold as written (before canonicalisation). " +
          "Fields wrong after canonicalisation (raw): " + (Array.isArray(rec.wrong_fields_raw) ? rec.wrong_fields_raw.map(str).join(", ") || "none" : "n/a") }),
        tbl);

      // interventions
      const ivs = Array.isArray(rec.interventions) ? rec.interventions : [];
      const ivBox = h("div", { id: "item-interventions" });
      if (!ivs.length) {
        ivBox.append(h("p", { text: "No guardrail intervention." + (Array.isArray(rec.guardrail_scope) && rec.guardrail_scope.length
          ? " In the scope of: " + rec.guardrail_scope.map(str).join(", ") + "." : "") }));
      }
      ivs.forEach(function (iv, j) {
        const info = cues && cues[j] ? cues[j] : null;
        const box = h("div", { class: "intervention" },
          h("p", null, h("b", { text: "rule " + str(iv && iv.rule) }), " changed ", h("code", { text: str(iv && iv.fields) }),
            ": ", h("code", { text: str(iv && iv.before) }), " → ", h("code", { text: str(iv && iv.after) }), " · ",
            iv && iv.correct ? h("span", { class: "ok", text: "correct (every changed field equals gold)" }) : h("span", { class: "bad", text: "not correct" })));
        if (info && info.ruleset) {
          box.append(h("p", { class: "small", text: "rule set " + str(info.ruleset) + (info.description ? ": " + info.description : "") }));
          const ul = h("ul", { class: "cues" });
          info.cues.forEach(function (c) {
            ul.append(h("li", null, "cue ", h("code", { text: str(c.cue) }), " — " + str(c.role) + ": ",
              h("b", { text: c.found === null ? "absent in the question" : c.found === true ? "present" : "found " + str(c.found) })));
          });
          box.append(ul, h("p", { class: "small muted", text: "Cues re-evaluated on the question with the rule set as it is now; the record keeps the rule, the fields and before/after." }));
        } else if (info && info.problem) {
          box.append(h("p", { class: "small muted", text: "cue: " + info.problem }));
        }
        ivBox.append(box);
      });
      root.append(h("h2", { text: "Guardrail interventions" }), ivBox);

      // SQL
      root.append(h("h2", { text: "SQL and bound parameters" }));
      if (typeof rec.sql === "string") {
        root.append(h("pre", { class: "sql", id: "item-sql", text: rec.sql }),
          h("p", { id: "item-params" }, "parameters: ", h("code", { text: str(rec.params) })));
      } else root.append(h("p", { class: "muted", id: "item-sql", text: "No SQL: the final intent was not valid (" + str(rec.final_status) + ")." }));
      if (rec.exec_error) root.append(h("p", { class: "bad", text: "execution error: " + str(rec.exec_error) }));

      // result
      const resBox = h("div", { id: "item-result" });
      resBox.append(h("p", null, "result rows: " + str(rec.result_rows) + " · result hash ", h("code", { text: str(rec.result_hash) }),
        " · gold hash ", h("code", { text: str(rec.gold_result_hash) }), " · ",
        rec.result_hash && rec.result_hash === rec.gold_result_hash ? h("span", { class: "ok", text: "same rows as gold" })
          : h("span", { class: "bad", text: rec.result_hash ? "rows differ from gold" : "no result" })));
      if (Array.isArray(rec.result_head) || Array.isArray(rec.gold_result_head)) {
        [["result", rec.result_head], ["gold result", rec.gold_result_head]].forEach(function (pair) {
          if (!Array.isArray(pair[1])) return;
          const t = h("table", { class: "grid small" }, h("caption", { text: "first rows of the " + pair[0] }));
          pair[1].forEach(function (row) { t.append(h("tr", null, (Array.isArray(row) ? row : [row]).map(function (v) { return h("td", { text: str(v) }); }))); });
          resBox.append(t);
        });
      } else {
        resBox.append(h("p", { class: "muted", id: "item-rows-note", text: "Result rows are not recorded in this run: a record keeps the row count and a hash of the rows (of the result and of the gold result), not the rows themselves." }));
      }
      root.append(h("h2", { text: "Result" }), resBox);

      // timings
      const tt = h("table", { class: "kv", id: "item-timing" });
      kv(tt, "end-to-end latency", secs(rec.latency_s, 3));
      kv(tt, "time to first token", secs(rec.ttft_s, 3));
      kv(tt, "inter-token mean / max", secs(rec.itl_mean_s, 3) + " / " + secs(rec.itl_max_s, 3));
      kv(tt, "queue", typeof rec.queued_s === "number" ? secs(rec.queued_s, 3) + " (from scheduled arrival to send)"
        : "not recorded (closed-loop run: a request is sent when a slot is free; time queued inside the server is part of TTFT)");
      if (typeof rec.latency_from_arrival_s === "number") kv(tt, "latency from arrival", secs(rec.latency_from_arrival_s, 3));
      kv(tt, "tokens prompt / completion / cached", num(rec.prompt_tokens) + " / " + num(rec.completion_tokens) + " / " + (rec.cached_tokens === null || rec.cached_tokens === undefined ? "not reported" : num(rec.cached_tokens)));
      kv(tt, "stream chunks", num(rec.chunks));
      kv(tt, "sent at", when(rec.started) + (typeof rec.concurrency === "number" ? " · concurrency " + rec.concurrency : ""));
      kv(tt, "retries", "attempts " + str(rec.attempts) + " · waits " + str(rec.retry_waits_s));
      root.append(h("h2", { text: "Timings and tokens" }), tt);

      root.append(h("details", null, h("summary", { text: "the whole record (JSON)" }),
        h("pre", { class: "json", id: "item-json", text: JSON.stringify(rec, null, 2) })));
    });
  }

  // ------------------------------------------------------------------ compare
  function loadCheckLike(sel) {
    const keys = ["model", "prompt", "evalset_sha256", "prompt_sha256"];
    const f0 = sel[0].facts;
    const same = sel.every(function (r) {
      return keys.every(function (key) { return JSON.stringify(r.facts[key]) === JSON.stringify(f0[key]); }) &&
        JSON.stringify(r.facts.guardrails) === JSON.stringify(f0.guardrails) &&
        JSON.stringify(r.facts.sampling) === JSON.stringify(f0.sampling);
    });
    const levels = sel.map(function (r) { return r.facts.concurrency; });
    return same && new Set(levels.map(String)).size > 1;
  }
  function renderCompare(root, route, still) {
    const rs = runs();
    let sel = (route.raw[0] || "").split(",").filter(Boolean).map(function (x) { return runKey(route.decode(x)); })
      .filter(function (x) { return x >= 0; });
    sel = sel.filter(function (x, i) { return sel.indexOf(x) === i; });
    if (!sel.length) {
      const groups = {};
      rs.forEach(function (r) { (groups[r.evalset_key] = groups[r.evalset_key] || []).push(r.key); });
      const g = Object.keys(groups).map(function (key) { return groups[key]; }).find(function (x) { return x.length >= 2; });
      sel = g ? g.slice(0, 6) : [];
    }
    root.append(h("h1", { text: "Compare" }));
    const picker = h("div", { class: "controls", id: "compare-picker" });
    rs.forEach(function (r) {
      const cb = h("input", { type: "checkbox", value: r.key, checked: sel.indexOf(r.key) >= 0, "data-run": r.key });
      picker.append(h("label", { class: "pick" }, cb, " " + runLabel(r.key)));
    });
    picker.append(h("button", { type: "button", id: "compare-go", text: "compare selected", onclick: function () {
      const ks = Array.from(picker.querySelectorAll("input:checked")).map(function (x) { return runRef(Number(x.value)); });
      location.hash = "compare/" + ks.join(",");
    } }));
    root.append(picker);
    if (sel.length < 2) { root.append(h("p", { id: "compare-msg", text: "Select two or more runs of the same eval set." })); return null; }
    const chosen = sel.map(function (k) { return rs[k]; });
    if (new Set(chosen.map(function (r) { return r.evalset_key; })).size > 1) {
      root.append(h("p", { id: "compare-msg", class: "error", text: "These runs are of different eval sets (" +
        chosen.map(function (r) { return "#" + r.key + " " + str(r.facts.evalset); }).join(", ") + "): items can only be compared within one eval set." }));
      return null;
    }
    return Promise.all(sel.map(index)).then(function (ixs) {
      if (!still()) return;
      const pos = ixs.map(function (ix) { const m = new Map(); ix.id.forEach(function (id, i) { if (!m.has(id)) m.set(id, i); }); return m; });
      const allIds = [];
      const seen = new Set();
      ixs.forEach(function (ix) { ix.id.forEach(function (id) { if (!seen.has(id)) { seen.add(id); allIds.push(id); } }); });
      const common = allIds.filter(function (id) { return pos.every(function (m) { return m.has(id); }); });
      const partial = allIds.filter(function (id) { return !pos.every(function (m) { return m.has(id); }); });

      root.append(h("p", { class: "muted", id: "compare-runs" }, chosen.map(function (r, i) {
        return h("span", { class: "runchip" }, (i ? "B" + i : "A") + " = ", h("a", { href: itemsHref(r.key), text: runLabel(r.key) }));
      })));
      // McNemar
      const mt = h("table", { class: "grid", id: "mcnemar" }, h("thead", null, h("tr", null,
        ["A", "B", "items in both", "A right, B wrong (b)", "B right, A wrong (c)", "exact McNemar p"].map(function (t) { return h("th", { text: t }); }))));
      const mb = h("tbody");
      for (let i = 0; i < sel.length; i++) for (let j = i + 1; j < sel.length; j++) {
        const lo = Math.min(sel[i], sel[j]), hi = Math.max(sel[i], sel[j]);
        const pr = meta().pairs.find(function (x) { return x.a === lo && x.b === hi; });
        if (!pr) continue;
        const flip = sel[i] !== lo;
        mb.append(h("tr", { "data-a": sel[i], "data-b": sel[j] },
          h("td", { text: runLabel(sel[i]) }), h("td", { text: runLabel(sel[j]) }), h("td", { class: "num", text: pr.n }),
          h("td", { class: "num mc-b", text: flip ? pr.c_count : pr.b_count }), h("td", { class: "num mc-c", text: flip ? pr.b_count : pr.c_count }),
          h("td", { class: "num mc-p", text: pval(pr.p) })));
      }
      mt.append(mb);
      root.append(h("h2", { text: "Paired comparison (final correctness)" }), mt);
      root.append(h("h2", { text: "Accuracy of these runs" }), accuracyPlot(chosen));

      // flips
      const flipped = [], same = [];
      common.forEach(function (id) {
        const oks = pos.map(function (m, r) { return ixs[r].correct_final[m.get(id)]; });
        (oks.some(function (v) { return v !== oks[0]; }) ? flipped : same).push(id);
      });
      const dirOf = function (id) {
        const a = ixs[0].correct_final[pos[0].get(id)];
        const b = ixs[ixs.length - 1].correct_final[pos[pos.length - 1].get(id)];
        if (sel.length === 2) return a ? "right → wrong" : "wrong → right";
        return a === b ? "mixed" : a ? "right → wrong" : "wrong → right";
      };
      const order = { "wrong → right": 0, "right → wrong": 1, mixed: 2 };
      flipped.sort(function (x, y) { return order[dirOf(x)] - order[dirOf(y)]; });
      const nUp = flipped.filter(function (id) { return dirOf(id) === "wrong → right"; }).length;
      const nDown = flipped.filter(function (id) { return dirOf(id) === "right → wrong"; }).length;
      // bytes
      const lc = loadCheckLike(chosen);
      const differ = common.filter(function (id) {
        const h0 = ixs[0].raw_hash[pos[0].get(id)];
        return ixs.some(function (ix, r) { return ix.raw_hash[pos[r].get(id)] !== h0; });
      });
      const byteBox = h("div", { id: "bytes" });
      const byteSection = [h("h2", { text: lc ? "Quality under load: output bytes across concurrency levels" : "Raw output bytes" }),
        h("p", { id: "identity", "data-identical": common.length - differ.length, "data-items": common.length, "data-loadcheck": lc ? "1" : "0",
          text: (common.length - differ.length) + " / " + common.length + " items byte-identical across " + sel.length + " runs" +
            (lc ? " (concurrency " + chosen.map(function (r) { return str(r.facts.concurrency); }).join(", ") + ")" : "") +
            " — raw model text compared by SHA-256 of its UTF-8 bytes" }),
        byteBox];
      if (lc) add(root, byteSection);  // for a load-check, identity is the headline
      root.append(h("h2", { text: "Items" }),
        h("p", { id: "flip-count", "data-flipped": flipped.length, "data-up": nUp, "data-down": nDown, "data-common": common.length,
          text: flipped.length + " of " + common.length + " items flipped (" + nUp + " wrong → right, " + nDown + " right → wrong" +
            (sel.length > 2 ? ", " + (flipped.length - nUp - nDown) + " mixed; direction: first vs last run" : "") + "); flipped items first." +
            (partial.length ? " " + partial.length + " items are not in every run (listed last)." : "") }));
      const ft = h("table", { class: "grid items", id: "compare-table" }, h("thead", null, h("tr", null,
        [h("th", { text: "id" }), h("th", { text: "question" }), h("th", { text: "change" })].concat(
          chosen.map(function (r, i) { return h("th", { text: (i ? "B" + i : "A") + " #" + r.key }); })))));
      const fb = h("tbody");
      ft.append(fb);
      const flippedRows = flipped.map(function (id) { return [id, dirOf(id)]; });
      const otherRows = same.map(function (id) { return [id, "same"]; }).concat(partial.map(function (id) { return [id, "missing"]; }));
      let listed = flippedRows;
      const showAll = h("input", { type: "checkbox", id: "show-unchanged" });
      const pager = h("div", { class: "pager" });
      let page = 0;
      showAll.addEventListener("change", function () { page = 0; draw(); });
      function draw() {
        listed = showAll.checked ? flippedRows.concat(otherRows) : flippedRows;
        clear(fb);
        if (!listed.length) fb.append(h("tr", null, h("td", { colspan: 3 + sel.length, class: "muted", text: "No item flipped." })));
        listed.slice(page * PAGE, (page + 1) * PAGE).forEach(function (e) {
          const id = e[0];
          const first = pos.findIndex(function (m) { return m.has(id); });
          const q = ixs[first].question[pos[first].get(id)];
          fb.append(h("tr", { class: e[1] === "same" ? "" : "flipped", "data-change": e[1] },
            h("td", null, h("a", { href: itemHref(sel[first], pos[first].get(id)), text: id })),
            h("td", { class: "question", title: q, text: q }),
            h("td", { class: e[1] === "wrong → right" ? "ok" : e[1] === "same" ? "muted" : "bad", text: e[1] }),
            sel.map(function (k, r) {
              const at = pos[r].get(id);
              if (at === undefined) return h("td", { class: "muted", text: "absent" });
              return h("td", null, h("a", { href: itemHref(k, at) }, mark(ixs[r].correct_final[at])), " " + (ixs[r].error_final[at] || ""));
            })));
        });
        const pages = Math.max(1, Math.ceil(listed.length / PAGE));
        clear(pager).append(
          h("button", { type: "button", disabled: page === 0, text: "‹ prev", onclick: function () { page--; draw(); } }),
          " page " + (page + 1) + " of " + pages + " ",
          h("button", { type: "button", disabled: page >= pages - 1, text: "next ›", onclick: function () { page++; draw(); } }));
      }
      draw();
      root.append(h("p", null, h("label", null, showAll, " also list the " + otherRows.length + " items whose final correctness is the same in every run" +
        (partial.length ? " (or that are missing from a run)" : ""))), pager, h("div", { class: "scroll" }, ft));
      if (!lc) add(root, byteSection);

      if (!differ.length) return null;
      let dpage = 0;
      const dpager = h("div", { class: "pager" });
      const dlist = h("div", { id: "byte-diffs" });
      byteBox.append(dpager, dlist);
      function drawDiffs() {
        const ids = differ.slice(dpage * DIFF_PAGE, (dpage + 1) * DIFF_PAGE);
        const need = new Set();
        ids.forEach(function (id) { sel.forEach(function (k, r) { need.add("r" + k + "-c" + Math.floor(pos[r].get(id) / meta().chunk_size)); }); });
        const pages = Math.ceil(differ.length / DIFF_PAGE);
        clear(dpager).append(
          h("button", { type: "button", disabled: dpage === 0, text: "‹ prev", onclick: function () { dpage--; drawDiffs(); } }),
          " differing items, page " + (dpage + 1) + " of " + pages + " ",
          h("button", { type: "button", disabled: dpage >= pages - 1, text: "next ›", onclick: function () { dpage++; drawDiffs(); } }));
        return Promise.all(Array.from(need).map(load)).then(function () {
          clear(dlist);
          ids.forEach(function (id) {
            const size = meta().chunk_size;
            const textOf = function (r) { const at = pos[r].get(id); return store["r" + sel[r] + "-c" + Math.floor(at / size)].records[at % size].raw_text; };
            const a = textOf(0);
            const box = h("div", { class: "bytediff", "data-id": id }, h("p", null, h("b", null, h("a", { href: itemHref(sel[0], pos[0].get(id)), text: id }))));
            for (let r = 1; r < sel.length; r++) {
              const b = textOf(r);
              if (ixs[r].raw_hash[pos[r].get(id)] === ixs[0].raw_hash[pos[0].get(id)]) continue;
              if (typeof a !== "string" || typeof b !== "string") {
                const none = typeof a !== "string" ? "A #" + sel[0] : "#" + sel[r];
                const outcome = ixs[typeof a !== "string" ? 0 : r].outcome[pos[typeof a !== "string" ? 0 : r].get(id)];
                box.append(h("p", { class: "small diff-at", "data-byte": "none", "data-other": sel[r],
                  text: "A #" + sel[0] + " vs #" + sel[r] + ": " + none + " recorded no text (outcome " + str(outcome) + ")" }));
                const text = typeof a === "string" ? a : b;
                box.append(h("pre", { class: "raw diffline" }, h("span", { class: "side", text: (typeof a === "string" ? "A" : "#" + sel[r]) + "  " }),
                  visibleText(text.length > 400 ? text.slice(0, 400) + "…" : text)));
                continue;
              }
              const d = byteDiff(a, b);
              box.append(h("p", { class: "small diff-at", "data-byte": d.byteOffset, "data-other": sel[r],
                text: "A #" + sel[0] + " vs #" + sel[r] + ": first difference at byte " + d.byteOffset +
                  " (A " + d.bytesA + " bytes, #" + sel[r] + " " + d.bytesB + " bytes)" }),
                h("pre", { class: "raw diffline" }, h("span", { class: "side", text: "A  " }), diffSide(d, "A")),
                h("pre", { class: "raw diffline" }, h("span", { class: "side", text: "#" + sel[r] + " " }), diffSide(d, "B")));
            }
            dlist.append(box);
          });
        });
      }
      return drawDiffs();
    });
  }
  function byteDiff(a, b) {
    const A = Array.from(a), B = Array.from(b);
    let i = 0;
    while (i < A.length && i < B.length && A[i] === B[i]) i++;
    let j = 0;
    while (j < A.length - i && j < B.length - i && A[A.length - 1 - j] === B[B.length - 1 - j]) j++;
    const enc = new TextEncoder();
    return {
      byteOffset: enc.encode(A.slice(0, i).join("")).length, bytesA: enc.encode(a).length, bytesB: enc.encode(b).length,
      prefix: A.slice(0, i).join(""), midA: A.slice(i, A.length - j).join(""), midB: B.slice(i, B.length - j).join(""),
      suffix: A.slice(A.length - j).join(""),
    };
  }
  function diffSide(d, side) {
    const ctx = 48;
    const pre = Array.from(d.prefix), suf = Array.from(d.suffix);
    const frag = document.createDocumentFragment();
    if (pre.length > ctx) frag.append(h("span", { class: "muted", text: "…" }));
    frag.append(visibleText(pre.slice(-ctx).join("")));
    const mid = side === "A" ? d.midA : d.midB;
    frag.append(h("mark", { class: side === "A" ? "del" : "ins" }, mid ? visibleText(mid) : h("span", { class: "muted", text: "∅" })));
    frag.append(visibleText(suf.slice(0, ctx).join("")));
    if (suf.length > ctx) frag.append(h("span", { class: "muted", text: "…" }));
    return frag;
  }

  // ------------------------------------------------------------------ start
  function start() {
    if (!store.meta) {
      clear(app()).append(h("p", { class: "error", text: "No data: data/meta.js did not load." }));
      document.body.setAttribute("data-ready", "error");
      return;
    }
    window.addEventListener("hashchange", render);
    render();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
