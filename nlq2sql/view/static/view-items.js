/* nlq2sql view: the Items page and one item (see view.js for how data and text reach the page). */
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

  // ------------------------------------------------------------------ items
  /* Per run: lower-cased search text, made when first searched. */
  const searchCache = Object.create(null);
  function distinct(col) {
    const c = new Map();
    col.forEach(function (v) {
      (Array.isArray(v) ? v : [v]).forEach(function (x) { const key = x === null || x === undefined ? "(none)" : x; c.set(key, (c.get(key) || 0) + 1); });
    });
    return Array.from(c.entries()).sort(function (a, b) { return b[1] - a[1] || (a[0] < b[0] ? -1 : 1); });
  }
  const COLS = [
    ["pos", "#"], ["id", "id"], ["question", "question"], ["category", "category"], ["pred_kind", "answered"], ["status", "status"],
    ["error_raw", "error (raw)"], ["error_final", "error (final)"], ["correct_raw", "raw"], ["correct_final", "final"],
    ["correct_exec", "exec"], ["latency_s", "latency"], ["completion_tokens", "tokens"], ["interventions", "rules fired"]];
  const FILTERS = [["status", "status"], ["error_raw", "error (raw)"], ["error_final", "error (final)"], ["category", "category"],
    ["pred_kind", "answered kind"], ["rules", "rule fired"]];
  const KEYS = FILTERS.map(function (f) { return f[0]; }).concat(["iv", "ok", "q", "in", "sort", "dir"]);
  const SCOPES = [["", "question or id"], ["text", "raw output or SQL"], ["all", "all of these"]];

  /* The filter and sort of an Items view, from its address (the item page reads the same). */
  function specOf(params) {
    const f = {};
    KEYS.forEach(function (key) { f[key] = params.get(key) || ""; });
    f.sort = f.sort || "pos";
    return f;
  }
  function specQuery(f, page) {
    const params = new URLSearchParams();
    KEYS.forEach(function (key) { if (f[key] && !(key === "sort" && f[key] === "pos")) params.set(key, f[key]); });
    if (page) params.set("page", page + 1);
    const qs = params.toString();
    return qs ? "?" + qs : "";
  }
  /* Search text of run k for a scope; the raw output and SQL travel in data/rK-text.js, loaded on first use. */
  function searchText(k, ix, scope) {
    const c = searchCache[k] = searchCache[k] || {};
    const qid = function () {
      return c.q || (c.q = ix.question.map(function (qq, i) { return (qq + "\u0000" + ix.id[i]).toLowerCase(); }));
    };
    if (!scope) return Promise.resolve(qid());
    return load("r" + k + "-text").then(function (t) {
      c.t = c.t || t.raw_text.map(function (raw, i) { return ((raw || "") + "\u0000" + (t.sql[i] || "")).toLowerCase(); });
      if (scope === "text") return c.t;
      const q = qid();
      return c.a || (c.a = c.t.map(function (x, i) { return q[i] + "\u0000" + x; }));
    });
  }
  /* The positions of run k that the spec selects, in its order (a promise: search may need text). */
  function selectRows(k, ix, f) {
    return (f.q ? searchText(k, ix, f.in) : Promise.resolve(null)).then(function (low) {
      const rows = filterRows(ix, f, low);
      sortRows(ix, rows, f.sort, f.dir === "desc" ? -1 : 1);
      return rows;
    });
  }

  function renderItems(root, route, still) {
    const rs = runs();
    let k = route.parts.length ? runKey(route.parts[0]) : 0;
    if (!(k >= 0 && k < rs.length)) k = 0;
    const p = route.params;
    return index(k).then(function (ix) {
      if (!still()) return;
      const runSel = h("select", { id: "run-select", onchange: function () { location.hash = itemsHref(Number(runSel.value)); } },
        rs.map(function (r) { return h("option", { value: r.key, selected: r.key === k, text: runLabel(r.key) }); }));
      root.append(h("h1", { text: "Items" }), h("label", null, "run ", runSel));
      const controls = h("div", { class: "controls", role: "search", "aria-label": "filter items" });
      const inputs = {};
      const f0 = specOf(p);
      FILTERS.forEach(function (f) {
        const sel = h("select", { id: "filter-" + f[0], "data-filter": f[0] },
          h("option", { value: "", text: "any " + f[1] }),
          distinct(ix[f[0]]).map(function (e) { return h("option", { value: e[0], text: e[0] + " (" + e[1] + ")" }); }));
        sel.value = f0[f[0]];
        inputs[f[0]] = sel;
        controls.append(h("label", null, f[1] + " ", sel));
      });
      const choice = function (id, opts) { return h("select", { id: id }, opts.map(function (o) { return h("option", { value: o[0], text: o[1] }); })); };
      inputs.iv = choice("filter-iv", [["", "any"], ["yes", "fired"], ["no", "not fired"]]);
      inputs.ok = choice("filter-ok", [["", "any"], ["yes", "right"], ["no", "wrong"]]);
      inputs.in = choice("filter-in", SCOPES);
      inputs.q = h("input", { id: "filter-q", type: "search", placeholder: "text to find", size: 22 });
      ["iv", "ok", "in", "q"].forEach(function (key) { inputs[key].value = f0[key]; });
      const state = { sort: f0.sort, dir: f0.dir === "desc" ? -1 : 1, page: Math.max(0, parseInt(p.get("page") || "1", 10) - 1 || 0) };
      controls.append(h("label", null, "intervention ", inputs.iv), h("label", null, "final ", inputs.ok),
        h("label", null, "search ", inputs.q), h("label", null, " in ", inputs.in),
        h("button", { id: "filter-reset", type: "button", text: "reset", onclick: function () {
          Object.keys(inputs).forEach(function (key) { inputs[key].value = ""; });
          state.page = 0; update();
        } }),
        h("button", { id: "export-csv", type: "button", text: "export CSV", onclick: function () { exportCsv(k, ix, current); } }));
      root.append(controls);
      const countLine = h("p", { id: "match-count", class: "muted", "aria-live": "polite" });
      const accLine = h("p", { id: "subset-accuracy" });
      const pager = h("div", { class: "pager" });
      const table = h("table", { class: "grid items", id: "items-table" });
      const thead = h("thead");
      const tbody = h("tbody");
      table.append(thead, tbody);
      root.append(countLine, accLine, pager, scroller("Items", table));
      let current = [];

      const spec = function () {
        const f = {};
        FILTERS.forEach(function (x) { f[x[0]] = inputs[x[0]].value; });
        ["iv", "ok", "q", "in"].forEach(function (key) { f[key] = inputs[key].value; });
        f.sort = state.sort; f.dir = state.dir < 0 ? "desc" : "";
        return f;
      };
      function headers() {
        clear(thead).append(h("tr", null, COLS.map(function (c) {
          return sortHeader(c[0], c[1], state.sort, state.dir, function (col) {
            if (state.sort === col) state.dir = -state.dir; else { state.sort = col; state.dir = 1; }
            state.page = 0; update(true);
          });
        })));
      }
      let timer = null;
      inputs.q.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(function () { state.page = 0; update(); }, 150); });
      Object.keys(inputs).forEach(function (key) { if (key !== "q") inputs[key].addEventListener("change", function () { state.page = 0; update(); }); });

      let seq = 0;
      function update(refocus) {
        const t0 = performance.now();
        const f = spec();
        const mine = ++seq;
        if (f.q && f.in) countLine.textContent = "searching…";
        return selectRows(k, ix, f).then(function (rows) {
          if (mine !== seq || !still()) return;
          current = rows;
          const pages = Math.max(1, Math.ceil(rows.length / PAGE));
          if (state.page >= pages) state.page = pages - 1;
          const start = state.page * PAGE;
          const shown = rows.slice(start, start + PAGE);
          countLine.setAttribute("data-count", rows.length);
          countLine.setAttribute("data-total", ix.id.length);
          countLine.textContent = rows.length + " of " + ix.id.length + " items match" +
            (rows.length ? " · showing " + (start + 1) + "–" + (start + shown.length) : "");
          let right = 0, raw = 0;
          rows.forEach(function (i) { right += ix.correct_final[i]; raw += ix.correct_raw[i]; });
          const acc = wilson(right, rows.length);
          accLine.setAttribute("data-k", right);
          accLine.setAttribute("data-n", rows.length);
          clear(accLine).append(rows.length === ix.id.length ? "All items: " : "These " + rows.length + " items: ",
            "final accuracy ", h("b", { class: "acc", text: pct(acc) }), " · raw accuracy " + pct(wilson(raw, rows.length)));
          clear(pager).append(
            h("button", { type: "button", id: "page-prev", disabled: state.page === 0, text: "‹ prev", onclick: function () { state.page--; update(); } }),
            h("span", { id: "page-info", text: " page " + (state.page + 1) + " of " + pages + " " }),
            h("button", { type: "button", id: "page-next", disabled: state.page >= pages - 1, text: "next ›", onclick: function () { state.page++; update(); } }));
          const focused = refocus && document.activeElement && document.activeElement.closest ? document.activeElement.closest("th") : null;
          const focusCol = focused ? focused.getAttribute("data-col") : null;
          headers();
          if (focusCol) { const b = thead.querySelector("th[data-col='" + focusCol + "'] button"); if (b) b.focus(); }
          const query = specQuery(f);
          clear(tbody);
          const frag = document.createDocumentFragment();
          shown.forEach(function (i) { frag.append(itemRow(k, ix, i, query)); });
          tbody.append(frag);
          countLine.setAttribute("data-ms", Math.round(performance.now() - t0));
          history.replaceState(null, "", "#" + itemsHref(k) + specQuery(f, state.page));
        });
      }
      return update();
    });
  }
  function filterRows(ix, f, low) {
    const n = ix.id.length;
    const out = [];
    const needle = f.q ? f.q.toLowerCase() : "";
    const eq = function (col, want) { if (!want) return null; const c = ix[col]; return function (i) { return (c[i] === null ? "(none)" : c[i]) === want; }; };
    const tests = [eq("status", f.status), eq("error_raw", f.error_raw), eq("error_final", f.error_final), eq("category", f.category),
      eq("pred_kind", f.pred_kind)].filter(Boolean);
    if (f.rules) {
      const rules = ix.rules;
      tests.push(f.rules === "(none)" ? function (i) { return !rules[i]; } : function (i) { return !!rules[i] && rules[i].indexOf(f.rules) >= 0; });
    }
    if (f.iv) tests.push(f.iv === "yes" ? function (i) { return ix.interventions[i] > 0; } : function (i) { return !ix.interventions[i]; });
    if (f.ok) tests.push(f.ok === "yes" ? function (i) { return ix.correct_final[i] === 1; } : function (i) { return ix.correct_final[i] !== 1; });
    if (needle && low) tests.push(function (i) { return low[i].indexOf(needle) >= 0; });
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
  function itemRow(k, ix, i, query) {
    const rules = ix.rules[i];
    return h("tr", { "data-pos": i },
      h("td", { class: "num", text: i + 1 }),
      h("td", null, h("a", { href: itemHref(k, i) + (query || ""), class: "item-link", text: ix.id[i] })),
      h("td", { class: "question", title: ix.question[i], text: ix.question[i] }),
      h("td", { text: ix.category[i] }),
      h("td", { class: ix.gold_kind[i] && ix.pred_kind[i] !== ix.gold_kind[i] ? "bad-soft" : null, title: "gold: " + str(ix.gold_kind[i]), text: str(ix.pred_kind[i]) }),
      h("td", null, statusTag(ix.status[i])),
      h("td", { text: str(ix.error_raw[i]) }), h("td", { text: str(ix.error_final[i]) }),
      h("td", null, mark(ix.correct_raw[i])), h("td", null, mark(ix.correct_final[i])), h("td", null, mark(ix.correct_exec[i])),
      h("td", { class: "num", text: secs(ix.latency_s[i]) }), h("td", { class: "num", text: num(ix.completion_tokens[i]) }),
      h("td", { class: "small", text: rules ? rules.join(", ") : "" }));
  }

  /* CSV of the filtered rows, in their order.  A cell that a spreadsheet would read as a formula
     (it begins with = + - @, a tab or a carriage return) gets a leading apostrophe. */
  function csvCell(v) {
    let s = v === null || v === undefined ? "" : Array.isArray(v) ? v.join(" ") : String(v);
    if (/^[=+\-@\t\r]/.test(s)) s = "'" + s;
    return '"' + s.replace(/"/g, '""') + '"';
  }
  const CSV_COLS = ["id", "question", "category", "gold_kind", "pred_kind", "status", "final_status", "error_raw", "error_final",
    "correct_raw", "correct_final", "correct_exec", "latency_s", "ttft_s", "prompt_tokens", "completion_tokens", "rules"];
  function csvText(ix, rows) {
    const lines = [["position"].concat(CSV_COLS).map(csvCell).join(",")];
    rows.forEach(function (i) { lines.push([i].concat(CSV_COLS.map(function (c) { return ix[c] ? ix[c][i] : null; })).map(csvCell).join(",")); });
    return lines.join("\r\n") + "\r\n";
  }
  function exportCsv(k, ix, rows) {
    const blob = new Blob(["\ufeff" + csvText(ix, rows)], { type: "text/csv;charset=utf-8" });
    const url = URL.createObjectURL(blob);
    const a = h("a", { rawhref: url, download: String(runs()[k].name || "run").replace(/[^\w.-]+/g, "_") + "-items.csv" });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(function () { URL.revokeObjectURL(url); }, 10000);
  }

  NV.pages.items = renderItems;
  NV.specOf = specOf;
  NV.specQuery = specQuery;
  NV.selectRows = selectRows;
})();
