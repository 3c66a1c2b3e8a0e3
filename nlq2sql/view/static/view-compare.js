/* nlq2sql view: the Compare page (see view.js for how data and text reach the page). */
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
  /* The change in accuracy B − A on the items of both, with a 95 % interval for paired
     proportions (Wald, on the discordant pairs: var = (b + c − (c − b)²/n) / n²). */
  const Z95 = 1.959963984540054;
  function pairedDelta(b, c, n) {
    if (!n) return { delta: null, ci95: null, b: b, c: c, n: n };
    const d = (c - b) / n;
    const se = Math.sqrt(Math.max(0, b + c - (c - b) * (c - b) / n)) / n;
    return { delta: d, ci95: [Math.max(-1, d - Z95 * se), Math.min(1, d + Z95 * se)], b: b, c: c, n: n };
  }
  function pp(x) { return (x > 0 ? "+" : x < 0 ? "−" : "±") + NV.fixed1(Math.abs(100 * x)); }
  function deltaText(d) {
    if (d.delta === null) return "n/a (no item in both)";
    return pp(d.delta) + " pp [" + pp(d.ci95[0]) + ", " + pp(d.ci95[1]) + "]";
  }
  function lineDiff(a, b) {
    const A = String(a).split("\n"), B = String(b).split("\n");
    const L = A.map(function () { return new Array(B.length + 1).fill(0); }).concat([new Array(B.length + 1).fill(0)]);
    for (let i = A.length - 1; i >= 0; i--) for (let j = B.length - 1; j >= 0; j--)
      L[i][j] = A[i] === B[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
    const keepA = new Set(), keepB = new Set();
    for (let i = 0, j = 0; i < A.length && j < B.length;) {
      if (A[i] === B[j]) { keepA.add(i); keepB.add(j); i++; j++; } else if (L[i + 1][j] >= L[i][j + 1]) i++; else j++;
    }
    const side = function (lines, keep, cls) {
      return h("pre", { class: "sql linediff" }, lines.map(function (line, i) {
        return keep.has(i) ? h("span", { text: line + "\n" }) : h("span", { class: "chg " + cls, "data-changed": "1", text: line + "\n" });
      }));
    };
    return [side(A, keepA, "del"), side(B, keepB, "ins")];
  }
  function flipDiff(ra, rb, la, lb) {
    const ia = ra.final_intent && typeof ra.final_intent === "object" ? ra.final_intent : {};
    const ib = rb.final_intent && typeof rb.final_intent === "object" ? rb.final_intent : {};
    const gold = ra.gold_intent && typeof ra.gold_intent === "object" ? ra.gold_intent : {};
    const keys = FIELDS.filter(function (f) { return f in ia || f in ib || f in gold; });
    Object.keys(ia).concat(Object.keys(ib)).forEach(function (f) { if (keys.indexOf(f) < 0) keys.push(f); });
    const t = h("table", { class: "grid small intents flip-intents" }, h("thead", null, h("tr", null,
      [["field"], ["A: " + la], ["B: " + lb], ["gold"]].map(function (x) { return h("th", { scope: "col", text: x[0] }); }))));
    const tb = h("tbody");
    keys.forEach(function (f) {
      const va = JSON.stringify(ia[f]), vb = JSON.stringify(ib[f]);
      const differs = va !== vb;
      tb.append(h("tr", { "data-field": f, "data-differs": differs ? "1" : "0", class: differs ? "diffrow" : null },
        h("th", { scope: "row" }, differs ? h("span", { class: "neq", title: "A and B differ", text: "≠ " }) : null, f),
        h("td", null, h("code", { text: str(ia[f]) })), h("td", null, h("code", { text: str(ib[f]) })),
        h("td", null, h("code", { text: str(gold[f]) }))));
    });
    t.append(tb);
    const sa = typeof ra.sql === "string" ? ra.sql : "(no SQL: " + str(ra.final_status) + ")";
    const sb = typeof rb.sql === "string" ? rb.sql : "(no SQL: " + str(rb.final_status) + ")";
    const d = lineDiff(sa, sb);
    return h("div", { class: "flip-detail" }, h("p", { class: "small muted", text: "Final intents (≠: A and B differ) and SQL (changed lines marked), A vs B." }),
      NV.scroller("intents of A and B", t),
      h("div", { class: "flipdiff" }, h("div", null, h("p", { class: "small", text: "SQL of A" }), d[0]),
        h("div", null, h("p", { class: "small", text: "SQL of B" }), d[1])));
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
    // the run picker: a search box narrows the list (by any word of a run's label)
    const picker = h("div", { class: "controls", id: "compare-picker" });
    const find = h("input", { type: "search", id: "compare-search", placeholder: "find runs", size: 24 });
    const list = h("div", { class: "picker-list", role: "group", "aria-label": "runs to compare", tabindex: 0 });
    rs.forEach(function (r) {
      const cb = h("input", { type: "checkbox", value: r.key, checked: sel.indexOf(r.key) >= 0, "data-run": r.key });
      list.append(h("label", { class: "pick", "data-label": (runLabel(r.key) + " " + r.dir).toLowerCase() }, cb, " " + runLabel(r.key)));
    });
    const shownCount = h("span", { class: "small muted", id: "compare-shown", text: rs.length + " runs" });
    find.addEventListener("input", function () {
      const words = find.value.toLowerCase().split(/\s+/).filter(Boolean);
      let n = 0;
      list.querySelectorAll("label.pick").forEach(function (l) {
        const ok = words.every(function (w) { return l.getAttribute("data-label").indexOf(w) >= 0; });
        l.hidden = !ok && !l.querySelector("input").checked;  // a chosen run stays in view
        if (!l.hidden) n++;
      });
      shownCount.textContent = n + " of " + rs.length + " runs";
    });
    picker.append(h("label", null, "find ", find), shownCount, list, h("button", { type: "button", id: "compare-go", text: "compare selected", onclick: function () {
      const ks = Array.from(list.querySelectorAll("input:checked")).map(function (x) { return runRef(Number(x.value)); });
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
      const last = sel.length - 1;
      const okAt = function (r, id) { return ixs[r].correct_final[pos[r].get(id)]; };

      root.append(h("p", { class: "muted", id: "compare-runs" }, chosen.map(function (r, i) {
        return h("span", { class: "runchip" }, (i ? "B" + i : "A") + " = ", h("a", { href: itemsHref(r.key), text: runLabel(r.key) }));
      })));
      // the change in accuracy, overall and per kind
      const dt = NV.table("compare-delta", null, ["B", "items in both", "A accuracy", "B accuracy", "B − A (95 % CI, paired)", "A right, B wrong", "B right, A wrong"]);
      const db = h("tbody");
      for (let r = 1; r < sel.length; r++) {
        let b = 0, c = 0, ka = 0, kb = 0;
        common.forEach(function (id) { const x = okAt(0, id), y = okAt(r, id); ka += x; kb += y; if (x && !y) b++; if (y && !x) c++; });
        const d = pairedDelta(b, c, common.length);
        db.append(h("tr", { "data-b": sel[r], "data-delta": d.delta === null ? "" : d.delta.toFixed(6) },
          h("td", { text: "B" + r + " " + runLabel(sel[r]) }), h("td", { class: "num", text: common.length }),
          h("td", { class: "num", text: pct(wilson(ka, common.length)) }), h("td", { class: "num", text: pct(wilson(kb, common.length)) }),
          h("td", { class: "num delta " + (d.delta < 0 ? "bad" : d.delta > 0 ? "ok" : ""), text: deltaText(d) }),
          h("td", { class: "num", text: b }), h("td", { class: "num", text: c })));
      }
      dt.append(db);
      const kinds = new Map();
      common.forEach(function (id) {
        const cat = ixs[0].category[pos[0].get(id)];
        const e = kinds.get(cat) || { n: 0, a: 0, b: 0, down: 0, up: 0 };
        const x = okAt(0, id), y = okAt(last, id);
        e.n++; e.a += x; e.b += y; if (x && !y) e.down++; if (y && !x) e.up++;
        kinds.set(cat, e);
      });
      const kt = NV.table("kind-deltas", null, ["kind (category)", "items", "A accuracy", "B" + last + " accuracy", "B" + last + " − A (95 % CI)", "regressed", "improved"]);
      const kb = h("tbody");
      Array.from(kinds.entries()).sort(function (x, y) { return (x[1].up - x[1].down) - (y[1].up - y[1].down) || (x[0] < y[0] ? -1 : 1); })
        .forEach(function (e) {
          const d = pairedDelta(e[1].down, e[1].up, e[1].n);
          kb.append(h("tr", { "data-kind": e[0] }, h("td", { text: e[0] || "(none)" }), h("td", { class: "num", text: e[1].n }),
            h("td", { class: "num", text: pct(wilson(e[1].a, e[1].n)) }), h("td", { class: "num", text: pct(wilson(e[1].b, e[1].n)) }),
            h("td", { class: "num delta " + (d.delta < 0 ? "bad" : d.delta > 0 ? "ok" : ""), text: deltaText(d) }),
            h("td", { class: "num", text: e[1].down }), h("td", { class: "num", text: e[1].up })));
        });
      kt.append(kb);
      root.append(h("h2", { text: "Accuracy change (final correctness, items in every run)" }), NV.scroller("accuracy change", dt),
        h("h3", { text: "Per kind, worst first" }), NV.scroller("accuracy change per kind", kt));
      // McNemar
      const mt = NV.table("mcnemar", null, ["A", "B", "items in both", "A right, B wrong (b)", "B right, A wrong (c)", "exact McNemar p"]);
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
      root.append(h("h2", { text: "Paired comparison (final correctness)" }), NV.scroller("paired comparison", mt));
      root.append(h("h2", { text: "Accuracy of these runs" }), accuracyPlot(chosen));

      // flips: regressions first
      const flipped = [], same = [];
      common.forEach(function (id) {
        const oks = pos.map(function (m, r) { return ixs[r].correct_final[m.get(id)]; });
        (oks.some(function (v) { return v !== oks[0]; }) ? flipped : same).push(id);
      });
      const dirOf = function (id) {
        const a = okAt(0, id), b = okAt(last, id);
        if (sel.length === 2) return a ? "right → wrong" : "wrong → right";
        return a === b ? "mixed" : a ? "right → wrong" : "wrong → right";
      };
      const order = { "right → wrong": 0, "wrong → right": 1, mixed: 2 };
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
          text: flipped.length + " of " + common.length + " items flipped (" + nDown + " right → wrong, " + nUp + " wrong → right" +
            (sel.length > 2 ? ", " + (flipped.length - nUp - nDown) + " mixed; direction: first vs last run" : "") + "); regressions first." +
            (partial.length ? " " + partial.length + " items are not in every run (listed last)." : "") }));
      const ft = NV.table("compare-table", "items", [h("th", { scope: "col", text: "id" }), h("th", { scope: "col", text: "question" }),
        h("th", { scope: "col", text: "kind" }), h("th", { scope: "col", text: "change" })].concat(
        chosen.map(function (r, i) { return h("th", { scope: "col", text: (i ? "B" + i : "A") + " #" + r.key }); }),
        [h("th", { scope: "col", text: "A vs B" + last })]));
      const fb = h("tbody");
      ft.append(fb);
      const flippedRows = flipped.map(function (id) { return [id, dirOf(id)]; });
      const otherRows = same.map(function (id) { return [id, "same"]; }).concat(partial.map(function (id) { return [id, "missing"]; }));
      const showAll = h("input", { type: "checkbox", id: "show-unchanged" });
      // filters over the flips: direction, error class (final, in any of the runs), kind
      const errs = new Set(), cats = new Set();
      allIds.forEach(function (id) {
        pos.forEach(function (m, r) { if (m.has(id)) { const e = ixs[r].error_final[m.get(id)]; if (e) errs.add(e); cats.add(ixs[r].category[m.get(id)]); } });
      });
      const opt = function (v, t) { return h("option", { value: v, text: t }); };
      const fDir = h("select", { id: "flip-dir" }, opt("", "any change"), opt("right → wrong", "right → wrong (regressions)"),
        opt("wrong → right", "wrong → right (improvements)"), sel.length > 2 ? opt("mixed", "mixed") : null);
      const fErr = h("select", { id: "flip-error" }, opt("", "any error class"), Array.from(errs).sort().map(function (e) { return opt(e, e); }));
      const fKind = h("select", { id: "flip-kind" }, opt("", "any kind"), Array.from(cats).sort().map(function (c) { return opt(c, c || "(none)"); }));
      const shownLine = h("span", { id: "flip-shown", class: "small muted" });
      const pager = h("div", { class: "pager" });
      let page = 0;
      [showAll, fDir, fErr, fKind].forEach(function (x) { x.addEventListener("change", function () { page = 0; draw(); }); });
      const keep = function (e) {
        const id = e[0];
        if (fDir.value && e[1] !== fDir.value) return false;
        if (fKind.value && !pos.some(function (m, r) { return m.has(id) && ixs[r].category[m.get(id)] === fKind.value; })) return false;
        if (fErr.value && !pos.some(function (m, r) { return m.has(id) && ixs[r].error_final[m.get(id)] === fErr.value; })) return false;
        return true;
      };
      function detail(id, row, button) {
        const open = row.nextSibling && row.nextSibling.classList && row.nextSibling.classList.contains("detail");
        if (open) { row.nextSibling.remove(); button.setAttribute("aria-expanded", "false"); return Promise.resolve(); }
        button.setAttribute("aria-expanded", "true");
        const size = meta().chunk_size;
        const pa = pos[0].get(id), pb = pos[last].get(id);
        return Promise.all([load("r" + sel[0] + "-c" + Math.floor(pa / size)), load("r" + sel[last] + "-c" + Math.floor(pb / size))]).then(function (cs) {
          const cell = h("td", { colspan: 5 + sel.length }, flipDiff(cs[0].records[pa % size], cs[1].records[pb % size], "#" + sel[0], "#" + sel[last]));
          row.after(h("tr", { class: "detail", "data-id": id }, cell));
        });
      }
      function draw() {
        const listed = (showAll.checked ? flippedRows.concat(otherRows) : flippedRows).filter(keep);
        shownLine.textContent = listed.length + " listed";
        shownLine.setAttribute("data-listed", listed.length);
        clear(fb);
        if (!listed.length) fb.append(h("tr", null, h("td", { colspan: 5 + sel.length, class: "muted", text: flippedRows.length ? "No item matches." : "No item flipped." })));
        listed.slice(page * PAGE, (page + 1) * PAGE).forEach(function (e) {
          const id = e[0];
          const first = pos.findIndex(function (m) { return m.has(id); });
          const q = ixs[first].question[pos[first].get(id)];
          const both = pos[0].has(id) && pos[last].has(id);
          const btn = both ? h("button", { type: "button", class: "flip-diff", "aria-expanded": "false", text: "diff" }) : null;
          const row = h("tr", { class: e[1] === "same" ? "" : "flipped", "data-change": e[1], "data-id": id },
            h("td", null, h("a", { href: itemHref(sel[first], pos[first].get(id)), text: id })),
            h("td", { class: "question", title: q, text: q }),
            h("td", { text: ixs[first].category[pos[first].get(id)] }),
            h("td", { class: e[1] === "wrong → right" ? "ok" : e[1] === "same" ? "muted" : "bad", text: e[1] }),
            sel.map(function (k, r) {
              const at = pos[r].get(id);
              if (at === undefined) return h("td", { class: "muted", text: "absent" });
              return h("td", null, h("a", { href: itemHref(k, at), "aria-label": (ixs[r].correct_final[at] ? "right" : "wrong") + " in #" + k }, mark(ixs[r].correct_final[at])),
                " " + (ixs[r].error_final[at] || ""));
            }), h("td", null, btn));
          if (btn) btn.addEventListener("click", function () { detail(id, row, btn); });
          fb.append(row);
        });
        const pages = Math.max(1, Math.ceil(listed.length / PAGE));
        clear(pager).append(
          h("button", { type: "button", disabled: page === 0, text: "‹ prev", onclick: function () { page--; draw(); } }),
          " page " + (page + 1) + " of " + pages + " ",
          h("button", { type: "button", disabled: page >= pages - 1, text: "next ›", onclick: function () { page++; draw(); } }));
      }
      draw();
      root.append(h("div", { class: "controls", role: "search", "aria-label": "filter flipped items" },
        h("label", null, "change ", fDir), h("label", null, "error class ", fErr), h("label", null, "kind ", fKind), shownLine,
        h("label", null, showAll, " also list the " + otherRows.length + " items whose final correctness is the same in every run" +
          (partial.length ? " (or that are missing from a run)" : ""))), pager, NV.scroller("items of the compared runs", ft));
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

  NV.pages.compare = renderCompare;
  NV.pairedDelta = pairedDelta;
})();
