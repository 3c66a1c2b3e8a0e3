/* nlq2sql view: one item (see view.js for how data and text reach the page). */
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
    const spec = NV.specOf(route.params);
    const query = NV.specQuery(spec);
    return index(k).then(function (ix) {
      if (!(pos >= 0 && pos < ix.id.length)) {
        throw new Error("no such item: " + asked + " (run #" + k + " has " + ix.id.length + " items, positions 0 to " + (ix.id.length - 1) + ")");
      }
      return Promise.all([ix, load("r" + k + "-c" + Math.floor(pos / size)), query ? NV.selectRows(k, ix, spec) : null]);
    }).then(function (res) {
      if (!still()) return;
      const ix = res[0], chunk = res[1];
      // previous / next: within the filtered, sorted list the user came from (its filter is in the address)
      const list = res[2];
      const at = list ? list.indexOf(pos) : -1;
      const prevPos = at >= 0 ? (at > 0 ? list[at - 1] : null) : pos > 0 ? pos - 1 : null;
      const nextPos = at >= 0 ? (at < list.length - 1 ? list[at + 1] : null) : pos < ix.id.length - 1 ? pos + 1 : null;
      const where = at >= 0 ? " (" + (at + 1) + " of " + list.length + " in the filtered list)" : "";
      const rec = chunk.records[pos % size];
      const cues = chunk.cues[String(pos % size)] || null;
      const run = rs[k];
      const nav = h("nav", { class: "crumbs", "aria-label": "item navigation" }, h("a", { href: "runs", text: "Runs" }), " › ",
        h("a", { href: itemsHref(k) + query, id: "item-list", text: runLabel(k) + (query ? " (filtered)" : "") }), " › ",
        h("span", { text: str(rec.id) }), "  ",
        prevPos !== null ? h("a", { href: itemHref(k, prevPos) + query, id: "item-prev", "aria-keyshortcuts": "k p", text: "‹ previous" }) : null, " ",
        nextPos !== null ? h("a", { href: itemHref(k, nextPos) + query, id: "item-next", "aria-keyshortcuts": "j n", text: "next ›" }) : null,
        h("span", { class: "small muted", id: "item-where", text: where + " · keys ", }), h("span", { class: "kbd", text: "j" }),
        h("span", { class: "small muted", text: " next, " }), h("span", { class: "kbd", text: "k" }), h("span", { class: "small muted", text: " previous" }));
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
        NV.scroller("intents", tbl));

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
      if (typeof rec.gold_sql === "string") root.append(h("h3", { text: "Gold SQL" }), h("pre", { class: "sql", id: "item-gold-sql", text: rec.gold_sql }));
      else root.append(h("p", { class: "small muted", id: "item-gold-sql", text: "The gold SQL is not recorded in this run (the record keeps the gold intent above and a hash of the gold result)." }));

      // result
      root.append(h("h2", { text: "Result" }), resultBox(rec));

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

  /* Column names where the SQL says them: the aliases of its top-level SELECT list (the SQL the
     harness builds names every column); null when they cannot be read off. */
  function selectNames(sql, width) {
    if (typeof sql !== "string") return null;
    const m = /^\s*(?:WITH\b[\s\S]*?\)\s*)?SELECT\s+(?:DISTINCT\s+)?([\s\S]*?)\s+FROM\s/i.exec(sql);
    if (!m) return null;
    const cols = [];
    let depth = 0, cur = "";
    for (const ch of m[1]) {
      if (ch === "(") depth++;
      if (ch === ")") depth--;
      if (ch === "," && depth === 0) { cols.push(cur); cur = ""; } else cur += ch;
    }
    cols.push(cur);
    const names = cols.map(function (c) {
      const a = /\bAS\s+"?([\w ]+?)"?\s*$/i.exec(c.trim());
      if (a) return a[1];
      const plain = /(?:^|\.)"?(\w+)"?\s*$/.exec(c.trim());
      return plain ? plain[1] : null;
    });
    return names.length === width && names.every(Boolean) ? names : null;
  }
  /* Result and gold rows side by side (when the record holds them), each row that the other side
     lacks marked; column names from the SQL where it is recorded. */
  function resultBox(rec) {
    const box = h("div", { id: "item-result" });
    box.append(h("p", null, "result rows: " + str(rec.result_rows) + " · result hash ", h("code", { text: str(rec.result_hash) }),
      " · gold hash ", h("code", { text: str(rec.gold_result_hash) }), " · ",
      rec.result_hash && rec.result_hash === rec.gold_result_hash ? h("span", { class: "ok", text: "same rows as gold" })
        : h("span", { class: "bad", text: rec.result_hash ? "rows differ from gold" : "no result" })));
    const res = Array.isArray(rec.result_head) ? rec.result_head : null;
    const gold = Array.isArray(rec.gold_result_head) ? rec.gold_result_head : null;
    if (!res && !gold) {
      box.append(h("p", { class: "muted", id: "item-rows-note", text: "Result rows are not recorded in this run: a record keeps the row count and a hash of the rows (of the result and of the gold result), not the rows themselves." }));
      return box;
    }
    const key = function (row) { return JSON.stringify(Array.isArray(row) ? row : [row]); };
    const bag = function (rows) { const m = new Map(); (rows || []).forEach(function (r) { m.set(key(r), (m.get(key(r)) || 0) + 1); }); return m; };
    const side = function (which, rows, other, sql) {
      const wrap = h("div", { class: "rows-side" });
      if (!rows) { wrap.append(h("p", { class: "muted", text: "no " + which + " rows recorded" })); return wrap; }
      const width = rows.reduce(function (w, r) { return Math.max(w, Array.isArray(r) ? r.length : 1); }, 0);
      const names = selectNames(sql, width);
      const left = bag(other);
      const t = h("table", { class: "grid small rows", id: which === "result" ? "item-result-rows" : "item-gold-rows" },
        h("caption", { text: "first " + rows.length + " rows of the " + which + (names ? "" : " (column names not recorded)") }),
        h("thead", null, h("tr", null, h("th", { scope: "col", text: "" }),
          (names || Array.from({ length: width }, function (_, i) { return "column " + (i + 1); })).map(function (n) { return h("th", { scope: "col", text: n }); }))));
      const tb = h("tbody");
      rows.forEach(function (row) {
        const kk = key(row);
        const n = left.get(kk) || 0;
        const differs = other !== null && n === 0;
        if (n) left.set(kk, n - 1);
        tb.append(h("tr", { class: differs ? "diffrow" : null, "data-differs": differs ? "1" : "0" },
          h("td", { class: "neq", title: differs ? "not among the other side's rows" : null, text: differs ? "≠" : "" }),
          (Array.isArray(row) ? row : [row]).map(function (v) { return h("td", { text: str(v) }); })));
      });
      t.append(tb);
      wrap.append(NV.scroller(which + " rows", t));
      return wrap;
    };
    box.append(h("p", { class: "small muted", text: "≠ marks a row the other side does not have (rows compared as values; the first rows only, as recorded)." }),
      h("div", { class: "flipdiff" }, side("result", res, gold, rec.sql), side("gold result", gold, res, rec.gold_sql)));
    return box;
  }

  /* j / n: next item, k / p: previous (within the list the item was opened from). */
  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey || e.defaultPrevented) return;
    const t = e.target;
    if (t && t.closest && t.closest("input, select, textarea, [contenteditable]")) return;
    const id = e.key === "j" || e.key === "n" ? "item-next" : e.key === "k" || e.key === "p" ? "item-prev" : null;
    const a = id && document.getElementById(id);
    if (a) { e.preventDefault(); a.click(); }
  });

  NV.pages.item = renderItem;
})();
