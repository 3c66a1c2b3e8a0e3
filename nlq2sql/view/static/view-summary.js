/* nlq2sql view: the Breakdowns page and the trade-off view (see view.js for how data and text reach the page). */
"use strict";
(function () {
  const NV = window.__nlq2sql_view;
  const h = NV.h, svg = NV.svg, add = NV.add, clear = NV.clear, marked = NV.marked, str = NV.str, pct = NV.pct,
    secs = NV.secs, num = NV.num, when = NV.when, pval = NV.pval, mark = NV.mark, statusTag = NV.statusTag,
    visibleText = NV.visibleText, countWhitespace = NV.countWhitespace, meta = NV.meta, runs = NV.runs,
    runLabel = NV.runLabel, runRef = NV.runRef, runKey = NV.runKey, itemsHref = NV.itemsHref, itemHref = NV.itemHref,
    load = NV.load, index = NV.index, store = NV.store, accuracyPlot = NV.accuracyPlot, clip = NV.clip, wilson = NV.wilson,
    scroller = NV.scroller, sortHeader = NV.sortHeader;
  const PAGE = NV.PAGE, DIFF_PAGE = NV.DIFF_PAGE, FIELDS = NV.FIELDS;


  // ------------------------------------------------------------------ breakdowns of one run's summary
  function kvTable(id, rows) {
    const t = h("table", { class: "kv", id: id });
    rows.forEach(function (r) { if (r) t.append(h("tr", null, h("th", { scope: "row", text: r[0] }), h("td", { class: "num", text: r[1] }))); });
    return t;
  }
  function counts(obj) {
    return obj && typeof obj === "object" ? Object.keys(obj).map(function (k) { return k + " " + str(obj[k]); }).join(", ") : "—";
  }
  function missing(what) { return h("p", { class: "muted small", text: what + ": not in this run's summary." }); }

  function renderSummary(root, route, still) {
    const rs = runs();
    let k = route.parts.length ? runKey(route.parts[0]) : 0;
    if (!(k >= 0 && k < rs.length)) k = 0;
    const r = rs[k];
    const s = r.summary || {};
    const runSel = h("select", { id: "summary-run", onchange: function () { location.hash = "summary/" + runRef(Number(runSel.value)); } },
      rs.map(function (x) { return h("option", { value: x.key, selected: x.key === k, text: runLabel(x.key) }); }));
    root.append(h("h1", { text: "Breakdowns" }), h("label", null, "run ", runSel),
      h("p", { class: "small muted", text: s.computed_by_viewer ? "summary.json is missing: only the headline figures (computed by the viewer from the records) are known."
        : "From the run's summary.json, as the terminal report shows it; 95 % Wilson CI and k/n." }));
    const mb = s.majority_baseline;
    root.append(h("h2", { text: "Accuracy and the majority baseline" }), kvTable("summary-headline", [
      ["final accuracy", pct(s.final_accuracy)], ["raw accuracy", pct(s.raw_accuracy)], ["execution accuracy", pct(s.execution_accuracy)],
      mb ? ["majority baseline (always " + str(mb.label) + ")", pct(mb)] : null,
      ["status", counts(s.status_counts)], ["errors (raw)", counts(s.error_taxonomy_raw)], ["errors (final)", counts(s.error_taxonomy_final)],
      ["finish reasons", counts(s.finish_reasons)]]));

    // per kind
    root.append(h("h2", { text: "Per kind (category)" }));
    const cats = s.per_category && typeof s.per_category === "object" ? Object.keys(s.per_category) : [];
    if (cats.length) {
      const t = NV.table("per-kind", null, ["kind", "items", "raw accuracy", "final accuracy"]);
      const tb = h("tbody");
      cats.forEach(function (c) {
        const v = s.per_category[c] || {};
        tb.append(h("tr", { "data-kind": c }, h("th", { scope: "row", text: c }), h("td", { class: "num", text: str(v.n) }),
          h("td", { class: "num", text: pct(v.raw_accuracy) }), h("td", { class: "num", text: pct(v.final_accuracy) })));
      });
      t.append(tb);
      root.append(scroller("per-kind accuracy", t));
    } else root.append(missing("per-kind accuracy"));

    // confusion matrix: gold kind (rows) vs the kind answered (columns)
    root.append(h("h2", { text: "Confusion matrix: gold kind (rows) × answered kind (columns)" }));
    const cm = s.confusion_matrix;
    if (cm && Array.isArray(cm.labels) && Array.isArray(cm.rows_gold_cols_pred)) {
      const labels = cm.labels;
      const t = h("table", { class: "grid cm", id: "confusion" }, h("caption", { class: "small muted", text: "items; the diagonal is the kind answered right" }),
        h("thead", null, h("tr", null, h("th", { scope: "col", text: "gold ↓ / answered →" }),
          labels.map(function (l) { return h("th", { scope: "col", text: l }); }), h("th", { scope: "col", text: "total" }))));
      const tb = h("tbody");
      cm.rows_gold_cols_pred.forEach(function (row, i) {
        const total = row.reduce(function (a, b) { return a + b; }, 0);
        tb.append(h("tr", { "data-gold": labels[i] }, h("th", { scope: "row", text: labels[i] }),
          row.map(function (v, j) { return h("td", { class: "num" + (i === j ? " diag" : ""), text: v ? v : "·", "aria-label": v + " items" }); }),
          h("td", { class: "num", text: total })));
      });
      t.append(tb);
      root.append(scroller("confusion matrix", t));
    } else root.append(missing("confusion matrix"));

    // per field / part
    root.append(h("h2", { text: "Per field (part): raw answers with that field right" }));
    const fa = s.field_accuracy;
    if (fa && typeof fa === "object" && Object.keys(fa).length) {
      const t = NV.table("field-accuracy", null, ["field", "accuracy"]);
      const tb = h("tbody");
      Object.keys(fa).forEach(function (f) { tb.append(h("tr", { "data-field": f }, h("th", { scope: "row", text: f }), h("td", { class: "num", text: pct(fa[f]) }))); });
      t.append(tb);
      root.append(scroller("per-field accuracy", t));
    } else root.append(missing("per-field accuracy"));

    // guardrail rules
    root.append(h("h2", { text: "Guardrail rules: precision and recall" }));
    const rules = s.rules && typeof s.rules === "object" ? Object.keys(s.rules) : [];
    if (rules.length) {
      const t = NV.table("rules", null, ["rule", "interventions", "precision (right / fired)", "recall (right / could have helped)", "scope"]);
      const tb = h("tbody");
      rules.forEach(function (id) {
        const v = s.rules[id] || {};
        tb.append(h("tr", { "data-rule": id }, h("th", { scope: "row", text: id }), h("td", { class: "num", text: str(v.interventions) }),
          h("td", { class: "num", text: pct(v.precision) }), h("td", { class: "num", text: pct(v.recall) }), h("td", { class: "num", text: str(v.scope) })));
      });
      t.append(tb);
      root.append(scroller("guardrail rules", t));
    } else root.append(h("p", { class: "muted small", id: "rules", text: "No guardrail rule in this run." }));

    // abstention
    root.append(h("h2", { text: "Abstention" }));
    const sel = s.selective, ab = s.abstention;
    if (ab && typeof ab === "object") {
      root.append(kvTable("abstention", [["\"unanswerable\" answers", str(ab.abstained)], ["unanswerable items", str(ab.unanswerable_items)],
        ["precision (unanswerable / answered so)", pct(ab.precision)], ["recall (answered so / unanswerable)", pct(ab.recall)]]));
    }
    if (sel && typeof sel === "object") {
      root.append(kvTable("selective", [["coverage (answered)", pct(sel.coverage)], ["accuracy on answered items", pct(sel.accuracy_answered)],
        ["abstained", str(sel.abstained) + " of " + str(sel.n)],
        typeof sel.without_logprob_evidence === "number" ? ["answered without a confidence read-out", str(sel.without_logprob_evidence)] : null]));
      if (Array.isArray(sel.curve) && sel.curve.length) {
        const t = NV.table("selective-curve", null, ["answer when confidence ≥", "coverage", "accuracy"]);
        const tb = h("tbody");
        sel.curve.forEach(function (c) {
          tb.append(h("tr", null, h("td", { class: "num", text: typeof c.min_confidence === "number" ? c.min_confidence.toFixed(3) : str(c.min_confidence) }),
            h("td", { class: "num", text: pct(c.coverage) }), h("td", { class: "num", text: pct(c.accuracy) })));
        });
        t.append(tb);
        root.append(h("h3", { text: "Coverage and accuracy by confidence threshold" }), scroller("coverage-accuracy curve", t));
      }
    }
    if (!(ab && typeof ab === "object") && !(sel && typeof sel === "object")) {
      root.append(h("p", { class: "muted small", id: "abstention", text: "This run could not abstain (no abstention threshold, v1 answers): every item was answered." }));
    }
    return null;
  }

  // ------------------------------------------------------------------ trade-offs across runs
  function mean(xs) { const v = xs.filter(function (x) { return typeof x === "number"; }); return v.length ? v.reduce(function (a, b) { return a + b; }, 0) / v.length : null; }
  function p95(xs) {
    const v = xs.filter(function (x) { return typeof x === "number"; }).sort(function (a, b) { return a - b; });
    if (!v.length) return null;
    const at = (v.length - 1) * 0.95, lo = Math.floor(at), hi = Math.min(lo + 1, v.length - 1);
    return v[lo] + (v[hi] - v[lo]) * (at - lo);
  }
  function cost(r) {
    const s = r.summary || {}, m = r.manifest || {};
    for (const v of [s.cost_usd, s.cost && s.cost.usd, m.cost_usd]) if (typeof v === "number" && isFinite(v)) return v;
    return null;
  }
  /* Per run: final accuracy, p95 latency, tokens per item (prompt + completion), cost when known;
     the Pareto front: runs no other run beats on one without losing on another. */
  function tradeoffPoints(rs, ixs) {
    const pts = rs.map(function (r, i) {
      const s = r.summary || {}, t = s.timing || {};
      const acc = s.final_accuracy && typeof s.final_accuracy.value === "number" ? s.final_accuracy.value : null;
      const lat = t.latency_s && typeof t.latency_s.p95 === "number" ? t.latency_s.p95 : p95(ixs[i].latency_s);
      const pt = t.prompt_tokens && typeof t.prompt_tokens.mean === "number" ? t.prompt_tokens.mean : mean(ixs[i].prompt_tokens || []);
      const ct = t.completion_tokens && typeof t.completion_tokens.mean === "number" ? t.completion_tokens.mean : mean(ixs[i].completion_tokens);
      const tok = pt === null && ct === null ? null : (pt || 0) + (ct || 0);
      return { run: r, acc: acc, lat: lat, tok: tok, cost: cost(r), pareto: false };
    });
    const known = pts.filter(function (p) { return p.acc !== null && p.lat !== null && p.tok !== null; });
    known.forEach(function (p) {
      p.pareto = !known.some(function (q) {
        return q !== p && q.acc >= p.acc && q.lat <= p.lat && q.tok <= p.tok && (q.acc > p.acc || q.lat < p.lat || q.tok < p.tok);
      });
    });
    return pts;
  }
  function scatter(id, pts, xkey, xlabel, xfmt) {
    const geo = NV.plotGeom();
    const width = geo.width, height = geo.narrow ? 260 : 300, left = 54, right = 20, top = 14, bottom = 44;
    const use = pts.filter(function (p) { return p.acc !== null && p[xkey] !== null; });
    const g = svg("svg", { class: "plot", id: id, viewBox: "0 0 " + width + " " + height, width: width, height: height, role: "img",
      "aria-label": "final accuracy against " + xlabel + " per run; the Pareto front filled" });
    g.append(svg("title", { text: "final accuracy against " + xlabel + " per run; the Pareto front filled" }));
    if (!use.length) { g.append(svg("text", { x: 10, y: 20, class: "axis", text: "not recorded" })); return g; }
    const xmax = Math.max.apply(null, use.map(function (p) { return p[xkey]; })) * 1.08 || 1;
    const X = function (v) { return left + (width - left - right) * v / xmax; };
    const Y = function (v) { return top + (height - top - bottom) * (1 - v); };
    [0, 0.25, 0.5, 0.75, 1].forEach(function (v) {
      g.append(svg("line", { x1: left, x2: width - right, y1: Y(v), y2: Y(v), class: "gridline" }),
        svg("text", { x: left - 6, y: Y(v) + 4, "text-anchor": "end", class: "axis", text: (v * 100) + " %" }));
    });
    for (let t = 0; t <= 4; t++) {
      g.append(svg("text", { x: X(xmax * t / 4), y: height - 24, "text-anchor": "middle", class: "axis", text: xfmt(xmax * t / 4) }));
    }
    g.append(svg("text", { x: left, y: height - 6, class: "axis", text: xlabel + " → (filled: Pareto front)" }));
    use.forEach(function (p) {
      const cx = X(p[xkey]), cy = Y(p.acc);
      g.append(svg("circle", { cx: cx, cy: cy, r: p.pareto ? 6 : 4.5, class: p.pareto ? "pt pt-front" : "pt pt-off", "data-run": p.run.key },
        svg("title", { text: NV.runTitle(p.run) + ": " + NV.fixed1(100 * p.acc) + " %, " + xfmt(p[xkey]) + (p.pareto ? " (Pareto front)" : "") })),
        svg("text", { x: cx + 8, y: cy - 6, class: "axis", text: "#" + p.run.key }));
    });
    return g;
  }
  function renderTradeoff(box, rs, ixs) {
    const pts = tradeoffPoints(rs, ixs);
    const anyCost = pts.some(function (p) { return p.cost !== null; });
    const t = NV.table("tradeoff-table", null, ["#", "run", "final accuracy", "p95 latency", "tokens per item"].concat(anyCost ? ["cost"] : [], ["Pareto front"]));
    const tb = h("tbody");
    pts.forEach(function (p) {
      tb.append(h("tr", { "data-run": p.run.key, "data-pareto": p.pareto ? "1" : "0" },
        h("td", { text: p.run.key }), h("td", { text: p.run.label }),
        h("td", { class: "num", text: p.acc === null ? "n/a" : NV.fixed1(100 * p.acc) + " %" }), h("td", { class: "num", text: secs(p.lat) }),
        h("td", { class: "num", text: p.tok === null ? "n/a" : p.tok.toFixed(1) }),
        anyCost ? h("td", { class: "num", text: p.cost === null ? "not known" : "$" + p.cost.toFixed(4) }) : null,
        h("td", { class: p.pareto ? "pareto ok" : "muted", text: p.pareto ? "on the front" : "dominated" })));
    });
    t.append(tb);
    box.append(h("p", { class: "small muted", text: "A run is on the Pareto front when no other run is at least as accurate, as fast at p95 and as frugal in tokens per item (prompt + completion), and better in one of them." +
      (anyCost ? "" : " Cost is not recorded in these runs.") }),
      scroller("trade-offs", t), scatter("tradeoff-latency", pts, "lat", "p95 latency", function (v) { return v.toFixed(1) + " s"; }),
      scatter("tradeoff-tokens", pts, "tok", "tokens per item", function (v) { return v.toFixed(0); }));
  }

  NV.pages.summary = renderSummary;
  NV.tradeoff = renderTradeoff;
})();
