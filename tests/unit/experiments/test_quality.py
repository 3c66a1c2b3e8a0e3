"""The quality report is re-derived from records: change a record, the figure changes; a
record that no longer matches its summary is refused; names from runs are escaped."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nlq2sql.errors import Nlq2SqlError
from nlq2sql.experiments.quality import SEED_TABLE, render
from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.records.store import iter_records, records_digest

RUN = PROJECT_ROOT / "reports" / "conditions" / "smollm2-135m-retail-heldout" / "b-contrastive-branches-ex8"
CONDITIONS = ("none", "ranking")


def _copy(tmp_path: Path, name: str) -> Path:
    dst = tmp_path / "runs" / name
    shutil.copytree(RUN, dst)
    return dst


def _rewrite(run: Path, change: dict[str, dict]) -> None:
    """Rewrite records (by id) and keep the summary's digest in step, as a real re-run would."""
    path = run / "records.jsonl"
    recs = [dict(r, **change.get(r["id"], {})) for r in iter_records(path)]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    summary = json.loads((run / "summary.json").read_text())
    summary["records"] = records_digest(path).to_json()
    (run / "summary.json").write_text(json.dumps(summary))


def _final_cell(md: str, name: str) -> str:
    row = next(line for line in md.splitlines() if line.startswith(f"| {name}"))
    return row.split(" | ")[5]


def test_figures_follow_the_records(tmp_path: Path) -> None:
    run = _copy(tmp_path, "run-b")
    md = render([run], tmp_path / "q1", CONDITIONS)["markdown"].read_text()
    before = _final_cell(md, "run-b")
    k = int(before.rsplit("(", 1)[1].split("/")[0])
    assert k == sum(r["correct_final"] for r in iter_records(RUN / "records.jsonl")) and k > 0
    right = next(r["id"] for r in iter_records(run / "records.jsonl") if r["correct_final"])
    _rewrite(run, {right: {"raw_text": "not json"}})
    md2 = render([run], tmp_path / "q2", CONDITIONS)["markdown"].read_text()
    assert _final_cell(md2, "run-b").endswith(f"({k - 1}/60)")
    assert "‡ " in md2  # the small test warehouse is not the one recorded: some gold results differ
    # The seed's numbers are quoted as the seed's, beside ours.
    assert all(f"| {' | '.join(row)} |" in md2 for row in SEED_TABLE)
    assert "Guardrails head to head" in md2 and "| smollm2-135m/retail/heldout `run-b` | ranking |" in md2


def test_a_record_changed_behind_the_summary_is_refused(tmp_path: Path) -> None:
    run = _copy(tmp_path, "run-b")
    lines = (run / "records.jsonl").read_text().splitlines(keepends=True)
    (run / "records.jsonl").write_text("".join(lines[:-1]))
    with pytest.raises(Nlq2SqlError):
        render([run], tmp_path / "q", CONDITIONS)
    assert not (tmp_path / "q").exists()


def test_html_is_self_contained_and_escaped(tmp_path: Path) -> None:
    run = _copy(tmp_path, "<img src=x onerror=alert(1)>")
    page = render([run], tmp_path / "q", CONDITIONS)["html"].read_text()
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<script" not in page and "<code>" in page  # inline marks rendered, content escaped
    assert "http://" not in page and "https://" not in page.replace("https://json-schema.org", "")
    assert page.count("data:image/png;base64,") >= 1


def test_long_abstention_curves_are_shown_at_a_few_cutoffs() -> None:
    from nlq2sql.experiments.quality import thin_curve
    from nlq2sql.experiments.summary_views import cut
    from nlq2sql.records.summary_parts import CurvePoint
    from nlq2sql.stages.score import rate

    half = rate(1, 2)
    short = [CurvePoint.model_validate({"min_vote_share": v, "coverage": half, "accuracy": half})
             for v in (1.0, 0.6, 0.4)]
    assert thin_curve(short) == short  # self-consistency's few shares: all of them
    long = [CurvePoint.model_validate({"min_confidence": round(1 - i / 40, 3), "min_vote_share": round(1 - i / 40, 3),
                                      "coverage": half, "accuracy": half})
            for i in range(30)]  # 1.0 … 0.275
    cuts = [cut(p) for p in thin_curve(long)]
    assert cuts == [0.9, 0.8, 0.7, 0.6, 0.5, 0.275]


def test_unanswerable_precision_and_recall_are_listed_for_every_run_that_could_abstain() -> None:
    from types import SimpleNamespace

    from nlq2sql.experiments.quality import abstention_lines
    from nlq2sql.records.results import Summary
    from nlq2sql.records.summary_parts import Abstention
    from nlq2sql.stages.score import rate

    def run(name: str, abstention: dict | None) -> object:  # (a summary holding only what is listed)
        return SimpleNamespace(group=("qwen", "jaffle", name), label=name,
                               summary=Summary.model_construct(
                                   abstention=None if abstention is None else Abstention.model_validate(abstention)))

    rows = [run("unanswerable", {"abstained": 5, "unanswerable_items": 23,
                                 "precision": rate(4, 5), "recall": rate(4, 23)}),
            run("heldout", {"abstained": 2, "unanswerable_items": 0,
                            "precision": rate(0, 2), "recall": rate(0, 0)}),
            run("v1", None)]
    lines = abstention_lines(rows)  # type: ignore[arg-type]
    table = [ln for ln in lines if ln.startswith("| qwen")]
    assert len(table) == 2, "a run that could not abstain is not listed"
    assert "(4/5)" in table[0] and "(4/23)" in table[0]
    assert table[1].endswith("| — |") and "(0/2)" in table[1]
    assert abstention_lines([run("v1", None)]) == []  # type: ignore[list-item]
