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
  const DATA_NAME = /^r\d+-(index|text|c\d+)$/;
  const PAGE = 100;
  const DIFF_PAGE = 10;
  const FIELDS = ["intent", "metric", "dimension", "time_grain", "filters", "limit", "order"];

  // ------------------------------------------------------------------ data loading
  let policy = null;
  if (window.trustedTypes && window.trustedTypes.createPolicy) {
    policy = window.trustedTypes.createPolicy("nlq2sql", {
      createScriptURL: function (u) {
        if (/^data\/r\d+-(index|text|c\d+)\.js$/.test(u)) return u;
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
    ["runs", "summary", "items", "compare"].forEach(function (v) {
      const a = document.getElementById("nav-" + v);
      if (!a) return;
      const on = v === view || (v === "items" && view === "item");
      a.setAttribute("class", on ? "active" : "");
      if (on) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
    });
  }
  const pages = Object.create(null);
  let renderToken = 0;
  function render() {
    const token = ++renderToken;
    const route = parseHash();
    setNav(route.view);
    const root = clear(app());
    const still = function () { return token === renderToken; };
    let done;
    try {
      const page = route.view !== "runs" && pages[route.view];
      done = page ? page(root, route, still) : renderRuns(root, still);
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
  // What the model was shown and how it was asked, from the manifest (docs/conditions.md): the
  // schema, then each condition's label as the condition registry wrote it (bundle.run_meta).
  function conditions(f, s) {
    const parts = ["schema " + (s.schema ? str(s.schema) : "flat")];
    if (Array.isArray(f.condition_labels)) f.condition_labels.forEach(function (x) { parts.push(str(x)); });
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
        "client", "server", "when", "commit", "warehouse", "conditions"].map(function (t) { return h("th", { scope: "col", text: t }); }))));
    const tb = h("tbody");
    rs.forEach(function (r) {
      const f = r.facts;
      const s = f.sampling && typeof f.sampling === "object" ? f.sampling : {};
      const server = [f.server_version ? "vLLM " + str(f.server_version) : null, f.endpoint ? str(f.endpoint) : null,
        f.max_model_len ? "max_model_len " + str(f.max_model_len) : null].filter(Boolean).join(" · ");
      const dur = typeof f.started === "number" && typeof f.finished === "number" ? " (" + secs(f.finished - f.started, 0) + ")" : "";
      const links = h("div", { class: "small" }, h("a", { href: itemsHref(r.key), text: "items" }), " · ",
        h("a", { href: "summary/" + runRef(r.key), text: "breakdowns" }));
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
    root.append(h("h2", { text: "What ran" }), scroller("What ran", facts));

    const head = h("table", { class: "grid", id: "runs-headline" },
      h("thead", null, h("tr", null, ["#", "n", "raw accuracy", "final accuracy", "execution accuracy", "schema-valid",
        "interventions (precision)", "latency p50 / p95", "TTFT p50", "req/s", "errors (final)"].map(function (t) { return h("th", { scope: "col", text: t }); }))));
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
    root.append(h("h2", { text: "Headline figures (95 % Wilson CI, k/n)" }), scroller("Headline figures", head));
    root.append(h("h2", { text: "Accuracy by run" }), accuracyPlot(rs));
    const latBox = h("div", { id: "latency-plot" }, h("p", { class: "muted", text: "loading latencies…" }));
    root.append(h("h2", { text: "Latency distribution (e2e, per item)" }), latBox);
    const tradeBox = h("div", { id: "tradeoff" });
    root.append(h("h2", { text: "Trade-offs: accuracy, p95 latency, tokens per item" }), tradeBox);
    return Promise.all(rs.map(function (r) { return index(r.key); })).then(function (ixs) {
      if (!still()) return;
      clear(latBox).append(latencyPlot(rs, ixs));
      if (window.__nlq2sql_view.tradeoff) window.__nlq2sql_view.tradeoff(tradeBox, rs, ixs);
    });
  }

  // ------------------------------------------------------------------ plots (inline SVG)
  /* Plots are drawn at the page's width (never scaled down past legibility): on a narrow screen
     each run's label goes on its own line above its marks. */
  function plotGeom() {
    const el = app(), cs = window.getComputedStyle(el);
    const inner = (el.clientWidth || 900) - (parseFloat(cs.paddingLeft) || 0) - (parseFloat(cs.paddingRight) || 0);
    const width = Math.max(300, Math.min(900, Math.floor(inner - 2)));
    const narrow = width < 640;
    return { width: width, narrow: narrow, left: narrow ? 10 : 300, chars: narrow ? Math.floor((width - 20) / 6.2) : 46 };
  }
  function runTitle(r) { return "#" + r.key + " " + r.label; }
  function plotLabel(g, geo, x, y, text) {
    g.append(svg("text", { x: x, y: y, "text-anchor": geo.narrow ? "start" : "end", class: "axis", text: clip(text, geo.chars) },
      svg("title", { text: text })));  // the whole label on hover: a long name is clipped
  }
  function accuracyPlot(rs) {
    const geo = plotGeom();
    const rowH = geo.narrow ? 50 : 34, left = geo.left, width = geo.width, plotW = width - left - 30, top = 24;
    const height = top + rowH * rs.length + (geo.narrow ? 56 : 40);
    const g = svg("svg", { class: "plot", id: "accuracy-plot", viewBox: "0 0 " + width + " " + height, width: width, height: height, role: "img",
      "aria-label": "Raw and final accuracy per run with 95 % Wilson intervals" });
    g.append(svg("title", { text: "Raw and final accuracy per run with 95 % Wilson intervals" }));
    const x = function (v) { return left + v * plotW; };
    const axisY = height - (geo.narrow ? 34 : 18);
    [0, 0.25, 0.5, 0.75, 1].forEach(function (v) {
      g.append(svg("line", { x1: x(v), x2: x(v), y1: top - 6, y2: axisY - 16, class: "gridline" }),
        svg("text", { x: x(v), y: axisY, "text-anchor": "middle", class: "axis", text: (v * 100) + " %" }));
    });
    rs.forEach(function (r, i) {
      const y = geo.narrow ? top + i * rowH + 30 : top + i * rowH + rowH / 2;
      plotLabel(g, geo, geo.narrow ? left : left - 8, geo.narrow ? y - 16 : y + 4, runTitle(r));
      [["raw_accuracy", -6, "raw"], ["final_accuracy", 6, "final"]].forEach(function (spec) {
        const p = (r.summary || {})[spec[0]];
        if (!p || typeof p.value !== "number") return;
        const cy = y + spec[1];
        if (Array.isArray(p.ci95)) g.append(svg("line", { x1: x(p.ci95[0]), x2: x(p.ci95[1]), y1: cy, y2: cy, class: "ci ci-" + spec[2] }));
        g.append(svg("circle", { cx: x(p.value), cy: cy, r: 4, class: "pt pt-" + spec[2] },
          svg("title", { text: spec[2] + " accuracy " + pct(p) })));
      });
    });
    const ly = height - (geo.narrow ? 18 : 6);
    g.append(svg("circle", { cx: left + 4, cy: ly, r: 4, class: "pt pt-raw" }),
      svg("text", { x: left + 12, y: ly + 4, class: "axis", text: "raw intent" }),
      svg("circle", { cx: left + 100, cy: ly, r: 4, class: "pt pt-final" }),
      svg("text", { x: left + 108, y: ly + 4, class: "axis", text: "final (after guardrail)" }),
      svg("text", { x: geo.narrow ? left : left + 260, y: geo.narrow ? ly + 18 : ly + 4, class: "axis", text: "bars: 95 % Wilson CI" }));
    return g;
  }
  function clip(s, n) { s = String(s); return s.length > n ? s.slice(0, n - 1) + "…" : s; }

  function latencyPlot(rs, ixs) {
    let max = 0;
    ixs.forEach(function (ix) { ix.latency_s.forEach(function (v) { if (typeof v === "number" && v > max) max = v; }); });
    const geo = plotGeom();
    const bins = geo.narrow ? 16 : 24, width = geo.width, rowH = geo.narrow ? 84 : 70, left = geo.left, plotW = width - left - 30;
    const height = rowH * rs.length + 40;
    const g = svg("svg", { class: "plot", id: "latency-svg", viewBox: "0 0 " + width + " " + height, width: width, height: height, role: "img",
      "aria-label": "Histogram of per-item end-to-end latency per run" });
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
      if (geo.narrow) {
        plotLabel(g, geo, left, y0 - rowH + 22, runTitle(r) + " (n=" + n + ")");
      } else {
        plotLabel(g, geo, left - 8, y0 - 20, runTitle(r));
        g.append(svg("text", { x: left - 8, y: y0 - 6, "text-anchor": "end", class: "axis muted", text: "n=" + n }));
      }
      g.append(svg("line", { x1: left, x2: left + plotW, y1: y0, y2: y0, class: "gridline" }));
      const barTop = geo.narrow ? 34 : 16;
      counts.forEach(function (c, b) {
        if (!c) return;
        const bh = (rowH - barTop) * c / peak;
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

  // ------------------------------------------------------------------ shared pieces
  /* The 95 % Wilson interval, as score.wilson (the summary's shape). */
  const Z95 = 1.959963984540054;
  function wilson(k, n) {
    if (!n) return { value: null, k: 0, n: 0, ci95: null };
    const p = k / n, d = 1 + Z95 * Z95 / n;
    const c = (p + Z95 * Z95 / (2 * n)) / d;
    const half = Z95 * Math.sqrt(p * (1 - p) / n + Z95 * Z95 / (4 * n * n)) / d;
    const r4 = function (v) { return Math.round(v * 1e4) / 1e4; };
    return { value: p, k: k, n: n, ci95: [r4(Math.max(0, c - half)), r4(Math.min(1, c + half))] };
  }
  /* A region that scrolls sideways: focusable, so a keyboard can scroll it, and named. */
  function scroller(label, child) {
    return h("div", { class: "scroll", tabindex: 0, role: "region", "aria-label": label }, child);
  }
  /* A sortable column header: a button (focusable, Enter/Space) inside the th, which carries aria-sort. */
  function sortHeader(col, label, sort, dir, onsort, extra) {
    const on = sort === col;
    return h("th", Object.assign({ class: "sortable", "data-col": col, "aria-sort": on ? (dir > 0 ? "ascending" : "descending") : "none" }, extra || {}),
      h("button", { type: "button", class: "sort", onclick: function () { onsort(col); } }, label, on ? (dir > 0 ? " ▲" : " ▼") : ""));
  }
  function table(id, cls, headers) {
    return h("table", { class: "grid" + (cls ? " " + cls : ""), id: id },
      h("thead", null, h("tr", null, headers.map(function (t) { return t instanceof Node ? t : h("th", { scope: "col", text: t }); }))));
  }

  // ------------------------------------------------------------------ start
  window.__nlq2sql_view = {
    h: h, svg: svg, add: add, clear: clear, marked: marked, str: str, pct: pct, fixed1: fixed1, secs: secs, num: num, when: when,
    pval: pval, mark: mark, statusTag: statusTag, visibleText: visibleText, countWhitespace: countWhitespace, meta: meta,
    runs: runs, runLabel: runLabel, runRef: runRef, runKey: runKey, itemsHref: itemsHref, itemHref: itemHref, load: load,
    index: index, store: store, accuracyPlot: accuracyPlot, clip: clip, wilson: wilson, scroller: scroller,
    sortHeader: sortHeader, table: table, plotGeom: plotGeom, plotLabel: plotLabel, runTitle: runTitle, pages: pages,
    PAGE: PAGE, DIFF_PAGE: DIFF_PAGE, FIELDS: FIELDS, app: app,
  };
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

