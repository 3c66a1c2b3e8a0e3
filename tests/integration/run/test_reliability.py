"""Issue 13's positives: what is accepted, and how, once silent acceptance is gone.

- ``score --allow-missing`` records unanswered items as ``missing`` (not request errors) and
  the summary says how many; without it the same file is refused (tests/integration/cli/test_badinput.py).
- Eval sets: a UTF-8 byte-order mark and CRLF line ends are accepted (same items as the plain
  file); a non-UTF-8 byte is refused with its line and byte offset in the file.
- Summaries keep their records' count and SHA-256; ``compare`` accepts a run whose records
  match and (older runs, no hash) checks the count against ``n``.
- The retry budget is fixed per run: a resumed session continues it, never a fresh one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakeserver import FakeServer, script
from retail import retail_wh
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.errors import InputError
from nlq2sql.records.rundir import RunDir
from nlq2sql.records.store import records_digest
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.live import run_eval
from nlq2sql.stages.evalset import EVALSET_DIR, load_evalset
from nlq2sql.transport.client import RetryBudget

MODEL = "fake-model"
HELDOUT = (EVALSET_DIR / "heldout.jsonl").read_text().splitlines()


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeServer]:
    with FakeServer(tmp_path_factory.mktemp("relfake"), script(), model=MODEL) as f:
        yield f


@pytest.fixture(scope="module")
def run(fake: FakeServer, tmp_path_factory: pytest.TempPathFactory, small_warehouse: Path,
        cache_root: Path) -> Path:
    out = tmp_path_factory.mktemp("relrun") / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NLQ2SQL_CACHE_DIR", str(cache_root))
        run_eval(EvalConfig(evalset="heldout", out=out, endpoint=fake.url, model=MODEL, limit=3,
                            concurrency=2))
    return out


def test_score_allow_missing_counts_missing_not_request_errors(tmp_path: Path) -> None:
    es = tmp_path / "es.jsonl"
    es.write_text("\n".join(HELDOUT[:6]) + "\n")
    ids = [json.loads(x)["id"] for x in HELDOUT[:6]]
    resp = tmp_path / "resp.jsonl"
    resp.write_text("".join(json.dumps({"id": i, "text": "{}"}) + "\n" for i in ids[:2]))
    argv = ["score", "--evalset", str(es), "--responses", str(resp), "--out", str(tmp_path / "out")]
    refused = CliRunner().invoke(app, argv)
    assert refused.exit_code == 2 and "4 of 6 eval set items have no response" in refused.output
    assert not (tmp_path / "out").exists()
    ok = CliRunner().invoke(app, [*argv, "--allow-missing", "--json"])
    assert ok.exit_code == 0, ok.output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["status_counts"].get("missing") == 4
    assert "request_error" not in summary["status_counts"]
    assert summary["missing"] == {"n": 4, "allowed": True, "first_ids": ids[2:]}
    recs = [json.loads(x) for x in (tmp_path / "out" / "records.jsonl").read_text().splitlines()]
    missing = [r for r in recs if r["status"] == "missing"]
    assert sorted(r["id"] for r in missing) == ids[2:]
    assert all(r["final_status"] == "missing" and r["correct_final"] is False for r in missing)
    assert summary["records"] == records_digest(tmp_path / "out" / "records.jsonl").to_json()


def test_evalset_bom_and_crlf_accepted_non_utf8_located(tmp_path: Path) -> None:
    plain = tmp_path / "plain.jsonl"
    plain.write_text("\n".join(HELDOUT[:3]) + "\n")
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(HELDOUT[:3]).encode() + b"\r\n")
    assert load_evalset(bom, retail_wh()).cases == load_evalset(plain, retail_wh()).cases
    bad = tmp_path / "bad.jsonl"
    lines = [x.encode() for x in HELDOUT[:3]]
    lines[2] = lines[2].replace(b"by", b"by \xe9", 1)
    bad.write_bytes(b"\n".join(lines) + b"\n")
    offset = len(lines[0]) + len(lines[1]) + 2 + lines[2].index(b"\xe9")
    with pytest.raises(InputError) as exc:
        load_evalset(bad, retail_wh())
    assert f"bad.jsonl:3: not UTF-8: byte 0xe9 at byte offset {offset} of the file" in str(exc.value)


def test_summary_keeps_records_digest_and_compare_checks_it(run: Path, tmp_path: Path) -> None:
    summary = json.loads((run / "summary.json").read_text())
    assert summary["records"] == records_digest(run / "records.jsonl").to_json()
    assert summary["records"]["count"] == summary["n"] == 3
    RunDir.finished(run)  # accepted as it is
    result = CliRunner().invoke(app, ["compare", str(run), str(run), "--out", str(tmp_path / "report")])
    assert result.exit_code == 0, result.output
    # An older run (no digest kept): the record count is still checked against n.
    old = tmp_path / "old"
    old.mkdir()
    for name in ("manifest.json", "records.jsonl"):
        (old / name).write_bytes((run / name).read_bytes())
    (old / "summary.json").write_text(json.dumps({k: v for k, v in summary.items() if k != "records"}))
    RunDir.finished(old)
    lines = (old / "records.jsonl").read_text().splitlines(keepends=True)
    (old / "records.jsonl").write_text("".join(lines[:-1]))
    with pytest.raises(InputError, match="2 readable records, but the summary counts 3"):
        RunDir.finished(old)


def test_retry_budget_is_the_runs_not_the_sessions() -> None:
    whole = RetryBudget(40, 0.2)
    assert (whole.total, whole.left, whole.used) == (8, 8, 0)
    # Resumed with 4 items left and 3 retries already recorded: 5 left, not max(1, 4 × 0.2).
    resumed = RetryBudget(0, 0.0, used=3, total=8)
    assert (resumed.left, resumed.used) == (5, 3)
    assert all(resumed.take() for _ in range(5)) and not resumed.take()
    assert resumed.used == 8
