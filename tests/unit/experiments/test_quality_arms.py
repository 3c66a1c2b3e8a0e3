"""The quality report's answer-arm section is re-derived from records: each arm's own scorer over
the recorded raw text; change an answer, the figure, the McNemar pair and the agreement follow."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nlq2sql.errors import Nlq2SqlError
from nlq2sql.experiments.quality_arms import arm_lines, collect_arms, is_arm_run
from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.records.store import iter_records, records_digest

SET = PROJECT_ROOT / "reports" / "arms" / "qwen2.5-coder-0.5b" / "retail-heldout-v2"


def _copy(tmp_path: Path, arm: str) -> Path:
    src = SET / f"heldout-v2-{arm}"
    if not src.is_dir():
        pytest.fail(f"the committed arm run {src} is missing")
    dst = tmp_path / f"heldout-v2-{arm}"
    shutil.copytree(src, dst)
    return dst


def _rewrite(run: Path, rid: str, raw_text: str) -> None:
    path = run / "records.jsonl"
    recs = [dict(r, raw_text=raw_text) if r["id"] == rid else r for r in iter_records(path)]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    summary = json.loads((run / "summary.json").read_text())
    summary["records"] = records_digest(path).to_json()
    (run / "summary.json").write_text(json.dumps(summary))


def _row(lines: list[str], arm: str) -> list[str]:
    return next(line for line in lines if f"| heldout-v2 | {arm} |" in line).split(" | ")


def test_arm_section_follows_the_records(tmp_path: Path) -> None:
    query, sql = _copy(tmp_path, "query"), _copy(tmp_path, "sql")
    assert is_arm_run(sql)
    before = {r.manifest.answer: r for r in collect_arms([query, sql])}
    n = len(before["sql"].final_ok)
    k = sum(before["sql"].final_ok.values())
    assert n == sum(1 for _ in iter_records(sql / "records.jsonl")) and k > 0
    lines = arm_lines(list(before.values()))
    assert _row(lines, "sql")[5].endswith(f"({k}/{n})") and _row(lines, "query")[6] == "—"
    right = next(i for i, ok in before["sql"].final_ok.items() if ok)
    _rewrite(sql, right, "SELECT 1")  # a wrong answer where the model was right
    after = {r.manifest.answer: r for r in collect_arms([query, sql])}
    assert sum(after["sql"].final_ok.values()) == k - 1 and not after["sql"].final_ok[right]
    assert after["sql"].same_as_recorded == before["sql"].same_as_recorded - 1
    row = _row(arm_lines(list(after.values())), "sql")
    assert row[5].endswith(f"({k - 1}/{n})")
    b, c = (int(x) for x in row[6].split("(")[1].rstrip(")").split("/"))
    q = before["query"].final_ok
    assert (b, c) == (sum(q[i] and not after["sql"].final_ok[i] for i in q),
                      sum(after["sql"].final_ok[i] and not q[i] for i in q))


def test_a_record_changed_behind_the_summary_is_refused(tmp_path: Path) -> None:
    sql = _copy(tmp_path, "sql")
    with (sql / "records.jsonl").open("a") as f:
        f.write("{}\n")
    with pytest.raises(Nlq2SqlError):
        collect_arms([sql])
