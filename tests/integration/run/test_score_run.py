"""``nlq2sql score --run DIR``: a committed run re-derived from its own manifest and records.

Each committed run here is re-scored with nothing given by hand: the answer kind, the guardrails
(a learned one included), the layer and the eval set come from its manifest.  Where its inputs are
unchanged, ``records.jsonl``, ``summary.json`` and ``manifest.json`` come out byte for byte the
original's.  A record whose judgement was tampered with comes out as the scorers derive it, not as
it was written; a changed layer, database, eval set or learned artefact is refused naming the
manifest field and both values.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from repo_paths import ROOT
from snapshot import assert_same_json
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.records.store import MANIFEST, RECORDS, SUMMARY
from nlq2sql.semantic import warehouse

runner = CliRunner()
#: Small committed runs of each answer kind on the shipped retail warehouse (its build is cached).
V2_LEARNED = ROOT / "reports/main-job-v2/heldout"  # v2 query, learned:ranking + sort + values, 8 examples
V1_INTENT = ROOT / "reports/qwen2.5-coder-0.5b/matrix-adversarial/adversarial-baseline"
SQL = ROOT / "reports/arms/qwen2.5-coder-0.5b/retail-adversarial/adversarial-sql"
V1_OLDER = ROOT / "reports/main-job/heldout"  # recorded when v1 SQL was built by hand, before MetricFlow


@pytest.fixture(scope="module")
def full_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache holding the retail warehouse at its default scale, the build the committed runs used
    (deterministic: the same bytes, so the same ``db_sha256``)."""
    root = tmp_path_factory.mktemp("full-cache")
    warehouse.build(root / warehouse.DEFAULT_NAME)
    return root


@pytest.fixture(autouse=True)
def _full_warehouse(full_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NLQ2SQL_CACHE_DIR", str(full_cache))


def score_run(run: Path, out: Path, *extra: str) -> tuple[int, str]:
    res = runner.invoke(app, ["score", "--run", str(run), "--out", str(out), *extra])
    return res.exit_code, res.output


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("run", [V2_LEARNED, V1_INTENT, SQL], ids=["v2-query-learned", "v1-intent", "sql"])
def test_a_committed_run_is_reproduced_as_parsed(run: Path, tmp_path: Path) -> None:
    code, output = score_run(run, tmp_path / "out")
    assert code == 0, output
    assert_same_json(lines(tmp_path / "out" / RECORDS), lines(run / RECORDS), RECORDS)
    assert (tmp_path / "out" / MANIFEST).read_bytes() == (run / MANIFEST).read_bytes()  # copied
    new, old = (json.loads((d / SUMMARY).read_text()) for d in (tmp_path / "out", run))
    assert new.pop("records")["count"] == old.pop("records")["count"]  # (the sha256 is of the bytes written)
    assert_same_json(new, old, SUMMARY)
    report = json.loads((tmp_path / "out" / "rescore.json").read_text())
    assert report["identical"] == {RECORDS: True, SUMMARY: True, MANIFEST: True}
    # what a live session measured is carried, named; the figures are derived
    assert {"throughput", "harness", "outcomes"} <= set(report["carried_summary_keys"])
    assert "final_accuracy" not in report["carried_summary_keys"]


def test_judgements_are_derived_not_copied(tmp_path: Path) -> None:
    """A copy whose records and summary say one wrong item was right comes out as scored."""
    run = tmp_path / "run"
    shutil.copytree(V2_LEARNED, run)
    recs = (run / RECORDS).read_text().splitlines()
    i, rec = next((i, json.loads(line)) for i, line in enumerate(recs) if json.loads(line)["correct_final"] is False)
    rec["correct_final"] = True
    recs[i] = json.dumps(rec, separators=(",", ":"), ensure_ascii=False)
    (run / RECORDS).write_text("\n".join(recs) + "\n")
    code, output = score_run(run, tmp_path / "out")
    assert code == 0, output
    assert_same_json(lines(tmp_path / "out" / RECORDS), lines(V2_LEARNED / RECORDS), RECORDS)
    assert "records.jsonl: differs from the run" in output


def test_an_older_run_differs_only_where_the_harness_compiles_sql_otherwise(tmp_path: Path) -> None:
    """The v1 main job predates MetricFlow compilation: its SQL text is today's, every judgement
    and figure is the run's."""
    code, output = score_run(V1_OLDER, tmp_path / "out")
    assert code == 0, output
    old, new = lines(V1_OLDER / RECORDS), lines(tmp_path / "out" / RECORDS)
    assert [r["id"] for r in old] == [r["id"] for r in new]
    differing = {k for a, b in zip(old, new, strict=True) for k in a if a[k] != b.get(k)}
    assert differing == {"sql", "params"}
    s_old, s_new = json.loads((V1_OLDER / SUMMARY).read_text()), json.loads((tmp_path / "out" / SUMMARY).read_text())
    assert list(s_old) == list(s_new)
    assert {k for k in s_old if s_old[k] != s_new[k]} == {"records"}  # the digest of the new records


@pytest.mark.parametrize(("field", "value", "fragments"), [
    ("layer_sha256", "0" * 64, ["field 'layer_sha256'", "the semantic layer changed", "0" * 64]),
    ("db_sha256", "1" * 64, ["field 'db_sha256'", "the database changed", "1" * 64,
                             "13c0ccf6fd474d331091420e0795e2ae6db5e199c73e24d43ec3f405f940131f"]),
    ("evalset_sha256", "2" * 64, ["field 'evalset_sha256'", "the eval set changed", "2" * 64]),
    ("semantic_model_path", "elsewhere/semantic_model.yml", ["field 'semantic_model_path'", "is not there"]),
    ("guardrail_artefacts", {"learned:ranking": {"artefact_sha256": "3" * 64}},
     ["field 'guardrail_artefacts.learned:ranking.artefact_sha256'", "3" * 64, "fc26846df1f053db"]),
])
def test_changed_inputs_are_refused_naming_the_field(tmp_path: Path, field: str, value: object,
                                                     fragments: list[str]) -> None:
    run = tmp_path / "run"
    shutil.copytree(V2_LEARNED, run)
    m = json.loads((run / MANIFEST).read_text())
    m[field] = value
    (run / MANIFEST).write_text(json.dumps(m, indent=2))
    code, output = score_run(run, tmp_path / "out")
    assert code == 2, output
    flat = " ".join(output.split())
    assert str(run / MANIFEST) in flat or "manifest.json" in flat
    for frag in fragments:
        assert frag in flat, (frag, output)
    assert not (tmp_path / "out").exists()


def test_refuses_what_is_not_a_run_and_hand_given_inputs(tmp_path: Path) -> None:
    half = tmp_path / "half"
    half.mkdir()
    shutil.copy(V2_LEARNED / RECORDS, half / RECORDS)
    code, output = score_run(half, tmp_path / "out")
    assert code == 2 and "no manifest.json" in output and "manifest.json" in output
    code, output = score_run(V2_LEARNED, tmp_path / "out", "--responses", "r.jsonl", "--evalset", "heldout",
                             "--guardrails", "sort")
    assert code == 2
    assert "--run takes every input from the run's manifest; drop --evalset, --responses, --guardrails" in output
    code, output = score_run(V2_LEARNED, V2_LEARNED)
    assert code == 2 and "is the run itself" in output
    res = runner.invoke(app, ["score", "--out", str(tmp_path / "out")])
    assert res.exit_code == 2 and "pass --evalset and --responses" in res.output
    assert not (tmp_path / "out").exists()


def _unordered_limit(text: str | None) -> bool:
    try:
        answer = json.loads(text or "")
    except ValueError:
        return False
    return isinstance(answer, dict) and answer.get("limit") is not None and not answer.get("order_by")


@pytest.mark.parametrize(("run", "answer"), [(V1_INTENT, "intent"), (V2_LEARNED, "query")])
def test_a_score_run_with_missing_items_is_reproduced(run: Path, answer: str, tmp_path: Path) -> None:
    """A run ``score --responses`` wrote (items left unanswered under --allow-missing, guardrails
    given by hand) re-derived from its manifest alone."""
    # (an answer with a LIMIT and no order gets whichever rows DuckDB's parallel scan returns first:
    # two scorings may differ there, as two runs would; such answers are left out of the file)
    recs = [r for r in lines(run / RECORDS) if not _unordered_limit(r["raw_text"])]
    resp = tmp_path / "resp.jsonl"
    resp.write_text("".join(json.dumps({"id": r["id"], "text": r["raw_text"], "finish_reason": r["finish_reason"]})
                            + "\n" for r in recs[: len(recs) - 3]))
    evalset = json.loads((run / MANIFEST).read_text())["evalset"]
    res = runner.invoke(app, ["score", "--evalset", evalset, "--responses", str(resp), "--answer", answer,
                              "--guardrails", "sort", "--allow-missing", "--out", str(tmp_path / "scored")])
    assert res.exit_code == 0, res.output
    answered = len(recs) - 3
    missing = sum(r["status"] == "missing" for r in lines(tmp_path / "scored" / RECORDS))
    assert missing == len(lines(run / RECORDS)) - answered
    code, output = score_run(tmp_path / "scored", tmp_path / "out")
    assert code == 0, output
    for name in (RECORDS, SUMMARY, MANIFEST):
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "scored" / name).read_bytes(), name
