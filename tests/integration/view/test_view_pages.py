"""`nlq2sql view` in a real browser, part two: the summary's breakdowns, the trade-off view, the Items
page's subset accuracy / filters / search / CSV, result rows side by side, the Compare page's deltas,
filters and diffs, keyboard use, axe-core, and the layout at 390 and 1280 px.

Shares the browser, the bundle and the Viewer of ``tests/integration/view/test_view.py``; every figure asserted is
computed here from ``records.jsonl`` / ``summary.json`` (proportions with ``score.rate``).
"""

# ruff: noqa: F811 -- the fixtures imported from test_view are parameters of the tests below

from __future__ import annotations

import csv
import io
import json
import math
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page

from integration.view.test_view import (  # noqa: F401 -- fixtures shared with the first half
    HELDOUT,
    QWEN_ADV,
    ROOT,
    RUN_DIRS,
    Viewer,
    browser,
    bundle_dir,
    file_viewer,
    records,
    shot,
)
from nlq2sql.stages.report import pct
from nlq2sql.stages.score import rate
from nlq2sql.view import build_bundle, load_runs, write_bundle

pytestmark = pytest.mark.slow  # every test drives a Chromium browser

BASE, CONTRA = QWEN_ADV / "adversarial-baseline", QWEN_ADV / "adversarial-contrastive"
AXE_DIR = ROOT / ".cache" / "axe"
Z95 = 1.959963984540054


def share(k: int, n: int) -> dict[str, Any]:
    """A proportion as a summary file holds it (``score.rate``, written)."""
    return rate(k, n).to_json()


def summary(d: Path) -> dict[str, Any]:
    return json.loads((d / "summary.json").read_text())


# ---------------------------------------------------------------- breakdowns

def test_breakdowns_show_the_summary(file_viewer: Viewer, tmp_path: Path) -> None:
    s = summary(HELDOUT)
    page = file_viewer.open("summary/heldout-smollm2-135m", "summary")
    kinds = page.locator("#per-kind tbody tr")
    assert kinds.count() == len(s["per_category"])
    for row, (kind, v) in zip(kinds.all(), s["per_category"].items(), strict=True):
        assert row.locator("th, td").all_inner_texts() == [kind, str(v["n"]), pct(v["raw_accuracy"]),
                                                           pct(v["final_accuracy"])]
    cm = s["confusion_matrix"]
    for i, row in enumerate(page.locator("#confusion tbody tr").all()):
        cells = row.locator("td").all_inner_texts()
        assert cells == [str(v) if v else "·" for v in cm["rows_gold_cols_pred"][i]] + \
            [str(sum(cm["rows_gold_cols_pred"][i]))]
    fields = {r.locator("th").inner_text(): r.locator("td").inner_text()
              for r in page.locator("#field-accuracy tbody tr").all()}
    assert fields == {f: pct(v) for f, v in s["field_accuracy"].items()}
    rule = page.locator("#rules tbody tr[data-rule=false_ranking] td").all_inner_texts()
    r = s["rules"]["false_ranking"]
    assert rule == [str(r["interventions"]), pct(r["precision"]), pct(r["recall"]), str(r["scope"])]
    mb = s["majority_baseline"]
    assert f"majority baseline (always {mb['label']})\t{pct(mb)}" in page.locator("#summary-headline").inner_text()
    assert "could not abstain" in page.locator("#abstention").inner_text()
    shot(page, "summary")
    # a v2 run's abstention block and a selective run's coverage
    run = shutil.copytree(HELDOUT, tmp_path / "v2run")
    s2 = dict(s, abstention={"abstained": 7, "unanswerable_items": 5, "precision": share(4, 7),
                             "recall": share(4, 5)},
              selective={"n": 60, "abstained": 9, "coverage": share(51, 60), "accuracy_answered": share(3, 51),
                         "curve": [{"min_confidence": 0.9, "coverage": share(20, 60), "accuracy": share(2, 20)}],
                         "without_logprob_evidence": 0})
    (run / "summary.json").write_text(json.dumps(s2))
    site = write_bundle(build_bundle(load_runs([run])), tmp_path / "site")
    v = Viewer(file_viewer.context.browser, site.as_uri() + "/")
    try:
        page = v.open("summary/0", "summary")
        ab = page.locator("#abstention").inner_text()
        assert f"precision (unanswerable / answered so)\t{pct(share(4, 7))}" in ab
        assert f"recall (answered so / unanswerable)\t{pct(share(4, 5))}" in ab
        assert f"coverage (answered)\t{pct(share(51, 60))}" in page.locator("#selective").inner_text()
        assert page.locator("#selective-curve tbody td").all_inner_texts() == ["0.900", pct(share(20, 60)),
                                                                               pct(share(2, 20))]
        v.check_clean()
    finally:
        v.close()


def pareto(points: dict[int, tuple[float, float, float]]) -> set[int]:
    return {k for k, p in points.items() if not any(
        j != k and q[0] >= p[0] and q[1] <= p[1] and q[2] <= p[2] and q != p for j, q in points.items())}


def test_tradeoff_marks_the_pareto_front(file_viewer: Viewer) -> None:
    page = file_viewer.open("runs", "runs")
    page.wait_for_selector("#tradeoff-table")
    points = {}
    for k, d in enumerate(RUN_DIRS):
        s = summary(d)
        t = s["timing"]
        points[k] = (s["final_accuracy"]["value"], t["latency_s"]["p95"],
                     t["prompt_tokens"]["mean"] + t["completion_tokens"]["mean"])
        row = page.locator(f"#tradeoff-table tbody tr[data-run='{k}'] td").all_inner_texts()
        assert row[3] == f"{points[k][1]:.2f} s" and row[4] == f"{points[k][2]:.1f}"
    marked = {int(r.get_attribute("data-run") or -1) for r in page.locator("#tradeoff-table tr[data-pareto='1']").all()}
    assert marked == pareto(points) and 0 < len(marked) < len(RUN_DIRS)
    assert page.locator("#tradeoff-latency circle.pt-front").count() == len(marked)
    assert page.locator("#tradeoff-tokens circle").count() == len(RUN_DIRS)


# ---------------------------------------------------------------- items

def formula_run(tmp: Path) -> Path:
    run = shutil.copytree(CONTRA, tmp / "formulas")
    recs = records(run)
    recs[0].update(question="=HYPERLINK(\"http://x\",\"y\")", category="+cat")
    recs[1].update(id="@SUM(A1)", question="-2+3")
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return run


def test_items_subset_accuracy_filters_search_and_csv(browser: Browser, tmp_path: Path) -> None:
    run = formula_run(tmp_path)
    recs = records(run)
    v = Viewer(browser, write_bundle(build_bundle(load_runs([run])), tmp_path / "site").as_uri() + "/")
    try:
        page = v.open("items/0", "items")
        acc = page.locator("#subset-accuracy .acc")
        assert acc.inner_text() == pct(share(sum(r["correct_final"] for r in recs), len(recs)))
        kind = recs[5]["raw_intent"]["intent"] if recs[5]["raw_intent"] else "invalid"
        page.select_option("#filter-pred_kind", kind)
        sub = [r for r in recs if (r["raw_intent"]["intent"] if r["raw_intent"] else "invalid") == kind]
        page.wait_for_selector(f"#match-count[data-count='{len(sub)}']", state="attached")
        assert acc.inner_text() == pct(share(sum(r["correct_final"] for r in sub), len(sub)))
        assert set(page.locator("#items-table tbody td:nth-child(5)").all_inner_texts()) == {kind}
        page.click("#filter-reset")
        # search in the raw output and the SQL (loaded on demand), not in the question
        needle = "ORDER BY"
        page.select_option("#filter-in", "text")
        page.fill("#filter-q", needle.lower())
        hits = [r for r in recs if needle.lower() in ((r["raw_text"] or "") + "\0" + (r["sql"] or "")).lower()]
        page.wait_for_selector(f"#match-count[data-count='{len(hits)}']", state="attached")
        assert 0 < len(hits) < len(recs) and any(u.endswith("/data/r0-text.js") for u in v.requests)
        page.click("#filter-reset")
        page.wait_for_selector(f"#match-count[data-count='{len(recs)}']", state="attached")
        page.select_option("#filter-ok", "yes")
        right = [r for r in recs if r["correct_final"]]
        page.wait_for_selector(f"#match-count[data-count='{len(right)}']", state="attached")
        page.select_option("#filter-ok", "")
        # CSV of the filtered rows; formula-looking cells neutralised
        with page.expect_download() as dl:
            page.click("#export-csv")
        text = Path(dl.value.path()).read_text(encoding="utf-8-sig")
        rows = list(csv.reader(io.StringIO(text)))
        assert rows[0][:4] == ["position", "id", "question", "category"] and len(rows) == len(recs) + 1
        assert rows[1][2] == "'=HYPERLINK(\"http://x\",\"y\")" and rows[1][3] == "'+cat"
        assert rows[2][1] == "'@SUM(A1)" and rows[2][2] == "'-2+3"
        assert [r[1] for r in rows[3:]] == [r["id"] for r in recs[2:]]
        assert not any(c[:1] in "=+-@" for row in rows for c in row if c)
        v.check_clean()
    finally:
        v.close()


def test_items_rule_filter_and_prev_next_within_the_list(file_viewer: Viewer) -> None:
    recs = records(HELDOUT)
    page = file_viewer.open("items/0", "items")
    page.select_option("#filter-rules", "false_ranking")
    fired = [i for i, r in enumerate(recs) if any(iv["rule"] == "false_ranking" for iv in r["interventions"])]
    page.wait_for_selector(f"#match-count[data-count='{len(fired)}']", state="attached")
    file_viewer.click("#items-table tbody tr:nth-child(2) a.item-link", "item")
    assert page.locator("#item-id").inner_text() == recs[fired[1]]["id"]
    assert f"(2 of {len(fired)} in the filtered list)" in page.locator("#item-where").inner_text()
    page.evaluate("document.body.removeAttribute('data-ready')")
    page.keyboard.press("j")
    file_viewer.wait("item")
    assert page.locator("#item-id").inner_text() == recs[fired[2]]["id"]
    page.evaluate("document.body.removeAttribute('data-ready')")
    page.keyboard.press("k")
    file_viewer.wait("item")
    page.evaluate("document.body.removeAttribute('data-ready')")
    page.keyboard.press("k")
    file_viewer.wait("item")
    assert page.locator("#item-id").inner_text() == recs[fired[0]]["id"]
    assert page.locator("#item-prev").count() == 0  # the first of the list
    file_viewer.click("#item-list", "items")
    assert "rules=false_ranking" in page.url
    page.wait_for_selector(f"#match-count[data-count='{len(fired)}']", state="attached")


def test_result_and_gold_rows_side_by_side(browser: Browser, tmp_path: Path) -> None:
    run = shutil.copytree(HELDOUT, tmp_path / "rows")
    recs = records(run)
    i = next(j for j, r in enumerate(recs) if r["sql"] and " AS " in r["sql"])
    recs[i]["result_head"] = [["North", 10.5], ["South", 3], ["<b>West</b>", None]]
    recs[i]["gold_result_head"] = [["North", 10.5], ["East", 7], ["South", 3]]
    recs[i]["gold_sql"] = "SELECT c.region AS region, SUM(x) AS gold_total FROM t GROUP BY 1"
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    v = Viewer(browser, write_bundle(build_bundle(load_runs([run])), tmp_path / "site").as_uri() + "/")
    try:
        page = v.open(f"item/0/{i}", "item")
        res, gold = page.locator("#item-result-rows"), page.locator("#item-gold-rows")
        names = [a.split(" AS ")[-1].strip() for a in recs[i]["sql"].split("FROM")[0][7:].split(",")]
        assert res.locator("thead th").all_inner_texts()[1:] == names
        assert gold.locator("thead th").all_inner_texts()[1:] == ["region", "gold_total"]
        assert [r.get_attribute("data-differs") for r in res.locator("tbody tr").all()] == ["0", "0", "1"]
        assert [r.get_attribute("data-differs") for r in gold.locator("tbody tr").all()] == ["0", "1", "0"]
        assert res.locator("tbody tr").nth(2).locator("td").all_inner_texts() == ["≠", "<b>West</b>", "—"]
        assert page.locator("#item-gold-sql").inner_text() == recs[i]["gold_sql"]
        page = v.open(f"item/0/{(i + 1) % len(recs)}", "item")
        assert "gold SQL is not recorded" in page.locator("#item-gold-sql").inner_text()
        v.check_clean()
    finally:
        v.close()


# ---------------------------------------------------------------- compare

def paired_ci(b: int, c: int, n: int) -> tuple[float, float, float]:
    d = (c - b) / n
    se = math.sqrt(max(0.0, b + c - (c - b) ** 2 / n)) / n
    return d, max(-1.0, d - Z95 * se), min(1.0, d + Z95 * se)


def pp(x: float) -> str:
    return ("+" if x > 0 else "−" if x < 0 else "±") + format(abs(100 * x), ".1f")


def test_compare_explains_a_regression(file_viewer: Viewer) -> None:
    a, b = records(CONTRA), records(BASE)  # contrastive → baseline: the flips are regressions
    bm = {r["id"]: r for r in b}
    down = [r["id"] for r in a if r["correct_final"] and not bm[r["id"]]["correct_final"]]
    up = [r["id"] for r in a if not r["correct_final"] and bm[r["id"]]["correct_final"]]
    assert down
    page = file_viewer.open("compare/adversarial-contrastive,adversarial-baseline", "compare")
    d, lo, hi = paired_ci(len(down), len(up), len(a))
    assert page.locator("#compare-delta tbody td.delta").inner_text() == f"{pp(d)} pp [{pp(lo)}, {pp(hi)}]"
    for row in page.locator("#kind-deltas tbody tr").all():
        cat = row.get_attribute("data-kind")
        ids = [r["id"] for r in a if r["category"] == cat]
        kd = sum(i in down for i in ids)
        ku = sum(i in up for i in ids)
        d, lo, hi = paired_ci(kd, ku, len(ids))
        assert row.locator("td.delta").inner_text() == f"{pp(d)} pp [{pp(lo)}, {pp(hi)}]"
        assert row.locator("td").all_inner_texts()[-2:] == [str(kd), str(ku)]
    rows = page.locator("#compare-table tbody tr")
    changes = rows.locator("td:nth-child(4)").all_inner_texts()
    assert changes == ["right → wrong"] * len(down) + ["wrong → right"] * len(up)  # regressions first
    # filters: by kind and by error class
    cat = next(r["category"] for r in a if r["id"] == down[0])
    page.select_option("#flip-kind", cat)
    kind_ids = {r["id"] for r in a if r["category"] == cat} & set(down + up)
    assert page.locator("#flip-shown").get_attribute("data-listed") == str(len(kind_ids))
    page.select_option("#flip-kind", "")
    err = bm[down[0]]["error_final"]
    page.select_option("#flip-error", err)
    am = {r["id"]: r for r in a}
    err_ids = {i for i in down + up if err in (am[i]["error_final"], bm[i]["error_final"])}
    assert set(rows.locator("td:first-child").all_inner_texts()) == err_ids
    page.select_option("#flip-error", "")
    page.select_option("#flip-dir", "wrong → right")
    assert page.locator("#flip-shown").get_attribute("data-listed") == str(len(up))
    page.select_option("#flip-dir", "right → wrong")
    # the diff of one regression: its intents and its SQL, A vs B
    first = rows.first
    item = first.get_attribute("data-id")
    first.locator("button.flip-diff").click()
    detail = page.locator(f"#compare-table tr.detail[data-id='{item}']")
    detail.wait_for()
    ra, rb = am[item], bm[item]
    ia, ib = ra["final_intent"], rb["final_intent"]
    if ia is None or ib is None:  # no intent on one side: every field of the other differs
        differs = set(ia or ib or {})
    else:
        differs = {f for f in ia.keys() | ib.keys() if ia.get(f, ...) != ib.get(f, ...)}
    got = {r.get_attribute("data-field") for r in detail.locator(".flip-intents tr[data-differs='1']").all()}
    assert got == differs and differs
    if ra["sql"] != rb["sql"]:
        assert detail.locator(".linediff .chg").count() > 0
    assert first.locator("button.flip-diff").get_attribute("aria-expanded") == "true"
    # the picker narrows the list by a word of the label
    page.fill("#compare-search", "QWEN")
    visible = [x for x in page.locator("#compare-picker label.pick").all() if x.is_visible()]
    assert {x.locator("input").get_attribute("value") for x in visible} == {"4", "5"}  # the chosen two stay
    page.fill("#compare-search", "load-check c16")
    visible = [x for x in page.locator("#compare-picker label.pick").all() if x.is_visible()]
    assert len(visible) == 3  # the c16 run and the chosen two
    assert page.locator("#compare-shown").inner_text() == f"3 of {len(RUN_DIRS)} runs"
    page.fill("#compare-search", "")
    shot(page, "compare-regression")


# ---------------------------------------------------------------- keyboard, axe, layout

def test_keyboard_sorts_headers_and_reaches_scroll_regions(file_viewer: Viewer) -> None:
    page = file_viewer.open("items/0", "items")
    th = page.locator("th[data-col=latency_s]")
    assert th.get_attribute("aria-sort") == "none"
    th.locator("button").focus()
    page.keyboard.press("Enter")
    page.wait_for_selector("th[data-col=latency_s][aria-sort=ascending]", state="attached")
    assert page.evaluate("document.activeElement.closest('th').dataset.col") == "latency_s"  # focus stays
    page.keyboard.press("Enter")
    page.wait_for_selector("th[data-col=latency_s][aria-sort=descending]", state="attached")
    assert page.locator("th[aria-sort=none]").count() == page.locator("th.sortable").count() - 1
    for region in page.locator(".scroll").all():
        assert region.get_attribute("tabindex") == "0" and region.get_attribute("aria-label")


def axe_source() -> str:
    path = AXE_DIR / "node_modules" / "axe-core" / "axe.min.js"
    if not path.exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("npm is not installed: the accessibility test needs npm's axe-core")
        subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(AXE_DIR), "axe-core@4"],
                       check=True, capture_output=True, timeout=300)
    return path.read_text()


ROUTES = [("runs", "runs"), ("summary/heldout-smollm2-135m", "summary"), ("items/0", "items"),
          ("item/heldout-smollm2-135m/5", "item"), ("compare/adversarial-contrastive,adversarial-baseline", "compare")]


@pytest.fixture(scope="module")
def axe_js() -> str:
    return axe_source()


def test_axe_finds_no_serious_violation(browser: Browser, bundle_dir: Path, axe_js: str) -> None:
    # axe is injected as a script of its own, which the page's policy would refuse: this context
    # bypasses the policy for axe alone (the policy is tested everywhere else).
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=True)
    page = ctx.new_page()
    found = {}
    try:
        for route, ready in ROUTES:
            page.goto("about:blank")
            page.goto(bundle_dir.as_uri() + "/index.html#" + route)
            page.wait_for_selector(f'body[data-ready="{ready}"]', state="attached")
            if route.startswith("compare"):
                page.locator("button.flip-diff").first.click()
                page.locator("tr.detail").wait_for()
            page.add_script_tag(content=axe_js)
            res = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
            bad = [(v["id"], v["impact"], len(v["nodes"]), v["nodes"][0]["target"]) for v in res["violations"]
                   if v["impact"] in ("serious", "critical")]
            found[route] = bad
    finally:
        ctx.close()
    assert found == {r: [] for r, _ in ROUTES}, found


@pytest.fixture(params=[390, 1280])
def sized(request: pytest.FixtureRequest, browser: Browser, bundle_dir: Path) -> Iterator[tuple[int, Viewer]]:
    v = Viewer(browser, bundle_dir.as_uri() + "/")
    v.page.set_viewport_size({"width": request.param, "height": 844 if request.param == 390 else 900})
    yield request.param, v
    v.check_clean()
    v.close()


def test_layout_fits_the_screen(sized: tuple[int, Viewer]) -> None:
    width, v = sized
    for route, ready in ROUTES:
        page = v.open(route, ready)
        if route == "runs":
            page.wait_for_selector("#tradeoff-table")
        assert page.evaluate("document.documentElement.scrollWidth") <= width, route  # no page wider than the screen
        for plot in page.locator("svg.plot").all():  # drawn at the page's width: text at its own size
            box = plot.bounding_box()
            assert box is not None and box["width"] <= width
            assert box["width"] >= 0.98 * float(plot.get_attribute("width") or 0), route
        if width == 1280 and ready in ("items", "compare", "summary"):
            for table in ("#items-table", "#compare-table", "#per-kind", "#confusion"):
                for region in page.locator(f".scroll:has({table})").all():
                    assert region.evaluate("e => e.scrollWidth <= e.clientWidth"), (route, table)
        page.evaluate("window.scrollTo(0, 600)")
        assert page.locator("header").bounding_box()["y"] == 0  # the header stays in view
        page.evaluate("window.scrollTo(0, 0)")
        if width == 390 and route in ("runs", "items/0", "item/heldout-smollm2-135m/5"):
            shot_narrow(page, ready)


def luminance(rgb: str) -> float:
    def channel(c: float) -> float:
        c /= 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (float(x) for x in rgb[rgb.index("(") + 1:rgb.index(")")].split(",")[:3])
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def test_plot_labels_have_contrast(file_viewer: Viewer) -> None:
    """Every SVG text (axis labels, run labels, legends) at 4.5:1 or more against the white page
    (axe leaves SVG text to a person: it cannot tell the background)."""
    page = file_viewer.open("runs", "runs")
    page.wait_for_selector("#tradeoff-latency")
    fills = set(page.evaluate("Array.from(document.querySelectorAll('svg text')).map(t => getComputedStyle(t).fill)"))
    assert fills
    for fill in fills:
        ratio = (1.05) / (luminance(fill) + 0.05)
        assert ratio >= 4.5, (fill, ratio)


def shot_narrow(page: Page, name: str) -> None:
    target = ROOT / "docs" / "img" / f"view-{name}-390.png"
    page.mouse.move(0, 0)
    page.evaluate("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0)")  # header at the top
    height = min(1600, page.evaluate("document.documentElement.scrollHeight"))
    data = page.screenshot(full_page=True, clip={"x": 0, "y": 0, "width": 390, "height": height})
    if not target.exists() or target.read_bytes() != data:
        target.write_bytes(data)
