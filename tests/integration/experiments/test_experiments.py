"""The seed's experiments, on recorded runs (no model): load-check, matrix, compare, compact."""

from __future__ import annotations

import json
import re
from pathlib import Path

from retail import RETAIL, retail_wh
from typer.testing import CliRunner

from nlq2sql.answers.offline import score_responses
from nlq2sql.cli.main import app
from nlq2sql.experiments import compact as cx
from nlq2sql.experiments import loadcheck
from nlq2sql.records.store import write_json_atomic
from nlq2sql.stages.evalset import load_evalset
from nlq2sql.stages.intent import compact_json, compact_regex
from nlq2sql.stages.pipeline import ScoreConfig

runner = CliRunner()


def _responses(path: Path, *, rank_breakdowns: bool = False, change: str | None = None) -> Path:
    rows = []
    for c in load_evalset("heldout", retail_wh()).cases:
        gold = c.gold.model_dump(mode="json")
        if rank_breakdowns and c.gold.intent == "breakdown":
            gold.update(intent="top_n_by_metric", limit=10, order="desc")
        if c.id == change:
            gold.update(metric="units" if gold["metric"] != "units" else "orders")
        rows.append({"id": c.id, "text": json.dumps(gold, separators=(",", ":")), "finish_reason": "stop"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _run(tmp: Path, name: str, **kw: object) -> Path:
    out = tmp / name
    score_responses(ScoreConfig("heldout", _responses(tmp / f"{name}.jsonl", **kw), out))  # type: ignore[arg-type]
    return out


def test_load_check_finds_the_one_divergent_item_and_exits_1(tmp_path: Path) -> None:
    a, b = _run(tmp_path, "a"), _run(tmp_path, "b", change="ho-007")
    res = runner.invoke(app, ["load-check", "--runs", str(a), "--runs", str(b), "--out", str(tmp_path / "lc")])
    assert res.exit_code == 1, res.output
    result = json.loads((tmp_path / "lc" / "loadcheck.json").read_text())
    assert result["identical_items"] == 59 and result["items"] == 60
    [div] = result["divergent"]
    assert div["id"] == "ho-007" and not div["intents_equal"]
    assert div["text_a"][: div["first_diff_at"]] == div["text_b"][: div["first_diff_at"]]
    assert div["text_a"][div["first_diff_at"]] != div["text_b"][div["first_diff_at"]]
    assert "ho-007" in (tmp_path / "lc" / "loadcheck.md").read_text()
    allowed = runner.invoke(app, ["load-check", "--runs", str(a), "--runs", str(b), "--allow-diff",
                                  "--out", str(tmp_path / "lc2")])
    assert allowed.exit_code == 0


def test_load_check_identical_runs_pass(tmp_path: Path) -> None:
    a, b = _run(tmp_path, "a"), _run(tmp_path, "b")
    res = runner.invoke(app, ["load-check", "--runs", str(a), "--runs", str(b), "--out", str(tmp_path / "lc")])
    assert res.exit_code == 0, res.output
    assert loadcheck.compare_runs([a, b]).identical_items == 60


def test_matrix_rescoring_recorded_outputs(tmp_path: Path) -> None:
    ranker = _run(tmp_path, "ranker", rank_breakdowns=True)
    out = tmp_path / "mx"
    res = runner.invoke(app, ["matrix", "--runs", str(ranker), "--guardrails", "none,ranking", "--out", str(out)])
    assert res.exit_code == 0, res.output
    table = json.loads((out / "matrix.json").read_text())
    by = {c["guardrails"] and "ranking" or "none": c["summary"] for c in table["conditions"]}
    assert by["none"]["raw_accuracy"]["k"] == by["ranking"]["raw_accuracy"]["k"] == 30
    assert by["none"]["interventions"] == 0 and by["ranking"]["interventions"] == 30
    assert by["ranking"]["final_accuracy"]["k"] == 60
    [pair] = table["pairs"]
    assert pair["n"] == 60 and pair["a_right_b_wrong"] + pair["b_right_a_wrong"] == 30
    assert pair["mcnemar_exact_p"] < 1e-6
    assert "McNemar" in (out / "matrix.md").read_text()


def test_compare_writes_markdown_and_self_contained_html(tmp_path: Path) -> None:
    a, b = _run(tmp_path, "a"), _run(tmp_path, "ranker", rank_breakdowns=True)
    out = tmp_path / "report"
    res = runner.invoke(app, ["compare", str(a), str(b), "--out", str(out), "--gpu-cost-per-hour", "1"])
    assert res.exit_code == 0, res.output
    md = (out / "report.md").read_text()
    assert md.count("\n| ") >= 3 and "100.0 %" in md and "50.0 %" in md
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3 and "<script" not in html


def test_compact_regex_accepts_exactly_compact_intents() -> None:
    rx = re.compile(compact_regex(RETAIL))
    for case in load_evalset("heldout", retail_wh()).cases:
        text = compact_json(case.gold)
        assert rx.fullmatch(text)
        assert not rx.fullmatch(json.dumps(case.gold.model_dump(mode="json")))  # with spaces
    assert not rx.fullmatch('{"intent":"breakdown"}')


def _arm(tmp: Path, name: str, rows: list[dict]) -> Path:
    d = tmp / name
    d.mkdir()
    (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_json_atomic(d / "manifest.json", {"kind": "eval"})
    return d


def test_compact_analysis_counts_and_predicted_vs_measured(tmp_path: Path) -> None:
    intent = {"intent": "breakdown", "metric": "revenue", "dimension": "region", "time_grain": None,
              "filters": [], "limit": None, "order": None}
    pretty_text, compact_text = json.dumps(intent, indent=2), json.dumps(intent, separators=(",", ":"))

    def rec(i: int, text: str, toks: int, lat: float) -> dict:
        return {"id": f"q{i}", "question": f"question {i}", "raw_text": text, "completion_tokens": toks,
                "latency_s": lat, "itl_mean_s": 0.02, "raw_intent": intent}
    pretty = [rec(i, pretty_text, 60, 1.3) for i in range(4)]
    prompt_c = [rec(0, compact_text, 30, 0.7), rec(1, compact_text, 30, 0.7), rec(2, pretty_text, 60, 1.3),
                rec(3, pretty_text, 70, 1.5)]
    grammar = [rec(i, compact_text, 80, 1.7) for i in range(4)]  # fragmented: costs MORE
    res = cx.analyse({"pretty": _arm(tmp_path, "p", pretty), "prompt-compact": _arm(tmp_path, "pc", prompt_c),
                      "grammar-compact": _arm(tmp_path, "gc", grammar)}, None, "m")
    pc = res.comparisons["prompt-compact"]
    assert (pc.honoured, pc.ignored, pc.backfired) == (2, 1, 1)
    assert pc.tokens_saved_mean is not None and abs(pc.tokens_saved_mean - 12.5) < 1e-9
    assert pc.predicted_saving_s is not None and abs(pc.predicted_saving_s - 12.5 * 0.02) < 1e-9
    assert pc.measured_saving_s is not None and abs(pc.measured_saving_s - (1.3 - 1.05)) < 1e-9
    gc = res.comparisons["grammar-compact"]
    assert gc.backfired == 4 and (gc.tokens_saved_mean or 0) < 0 and (gc.measured_saving_s or 0) < 0
    assert res.arms["grammar-compact"].no_whitespace == 4
    assert res.arms["pretty"].no_whitespace == 0
    assert res.arms["post-parse-compact"].chars.mean == len(compact_text)
    md = cx.render_markdown(res)
    assert "backfired" in md and "-20.000" in md
