"""``nlq2sql batch`` runs the project's recommended configuration (v2 ``--answer query`` with
``--examples 8 --link-values both --guardrails learned:ranking,sort``) on the local engine and on
Ray Data, and a gold-SQL set, writing the records ``eval`` writes for the same items and answers;
``--engine ray-vllm`` refuses by name what it cannot apply.

Against the fault suite's fake server, a fresh one per run (its scripted answers are consumed per
question): the gold query for one item, another item's gold for the next, prose, and a v1 intent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, script
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.conditions.registry import REGISTRY
from nlq2sql.errors import InputError
from nlq2sql.records.store import iter_records
from nlq2sql.run.batch import run_batch
from nlq2sql.run.batch_config import BatchConfig, check
from nlq2sql.run.batch_shards import iter_shard_records
from nlq2sql.run.config import EvalConfig

pytest.importorskip("pyarrow")

MODEL = "fake-model"
MAIN_JOB = ["--answer", "query", "--examples", "8", "--link-values", "both", "--guardrails", "learned:ranking,sort"]
#: Fields that measure time or effort, not results (as in test_batch).
TIMING = {"latency_s", "ttft_s", "itl_mean_s", "itl_max_s", "started", "chunks", "attempts", "retry_waits_s",
          "sql_exec_s"}
#: Summary figures that are results (the rest measure time or say how the load was offered).
FIGURES = ("n", "raw_accuracy", "final_accuracy", "execution_accuracy", "schema_valid_rate", "interventions",
           "intervention_precision", "intervention_recall", "field_accuracy", "status_counts", "error_taxonomy_raw",
           "error_taxonomy_final", "finish_reasons", "per_category", "outcomes", "errors_by_class", "retries_used",
           "answer", "column_rule", "coverage", "abstentions")
runner = CliRunner()


def _v2_text(case: Any) -> str:
    """A v2 answer as a model writes it: the case's gold query."""
    g = case.gold
    return json.dumps({"metrics": list(g.metrics), "group_by": list(g.group_by),
                       "where": [w.model_dump(mode="json") for w in g.where or ()],
                       "order_by": [o.model_dump(mode="json") for o in g.order_by or ()], "limit": g.limit})


def sent(question: str, wh: Any) -> str:
    """The question as the main job's requests carry it (the fake answers by the last user message):
    with the value links' hint after it."""
    from nlq2sql.run.item import load_conditions

    cfg = EvalConfig(answer="query", conditions=REGISTRY.from_options(link_values="both"))
    messages = [{"role": "user", "content": question}]
    for cond in load_conditions(cfg, wh):
        messages, _ = cond.before(question, messages)
    return messages[-1]["content"]


def query_fake(tmp: Path, name: str) -> FakeServer:
    """Answers to heldout-v2's first four questions: right, another item's gold, prose, a v1 intent."""
    from nlq2sql.semantic import open_warehouse
    from nlq2sql.stages.queryset import load_query_set

    wh = open_warehouse("retail")
    cases = load_query_set("heldout-v2", wh.catalog).cases[:4]
    assert cases[0].gold is not None and cases[1].gold is not None
    texts = {cases[0].question: _v2_text(cases[0]), cases[1].question: _v2_text(cases[0]),
             cases[2].question: "Revenue went up."}
    by_q = {sent(q, wh): [{"kind": "text", "text": t}] for q, t in texts.items()}
    return FakeServer(tmp / f"fake-{name}", script(by_question=by_q), model=MODEL, delay_s=0.01)


def strip(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in rec.items() if k not in TIMING}


def differences(got: dict[str, dict[str, Any]], want: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    return {i: sorted(k for k in got[i].keys() | want[i].keys() if got[i].get(k) != want[i].get(k)) for i in want}


@pytest.fixture(scope="module")
def evaluated(cache_root: Path, small_warehouse: Path, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[tuple[Path, dict[str, Any], dict[str, dict[str, Any]]]]:
    """``eval`` of the main job on heldout-v2's first four items (in the tests' private cache, as
    the batches that follow run: a module fixture runs before the per-test one sets it)."""
    tmp = tmp_path_factory.mktemp("main-job")
    out = tmp / "eval"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NLQ2SQL_CACHE_DIR", str(cache_root))
        yield tmp, *_evaluate(tmp, out)


def _evaluate(tmp: Path, out: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    with query_fake(tmp, "eval") as f:
        res = runner.invoke(app, ["eval", "--evalset", "heldout-v2", *MAIN_JOB, "--limit", "4", "--concurrency", "2",
                                  "--endpoint", f.url, "--model", MODEL, "--out", str(out),
                                  "--max-failure-rate", "1"])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    return summary, {r["id"]: strip(r) for r in iter_records(out / "records.jsonl")}


def batch_main_job(tmp: Path, engine: str, *extra: str) -> tuple[Path, dict[str, Any], dict[str, dict[str, Any]]]:
    out = tmp / f"batch-{engine}"
    with query_fake(tmp, f"batch-{engine}") as f:
        res = runner.invoke(app, ["batch", "--engine", engine, "--evalset", "heldout-v2", *MAIN_JOB, "--limit", "4",
                                  "--concurrency", "2", "--endpoint", f.url, "--model", MODEL, "--out", str(out),
                                  "--format", "jsonl", "--shard-rows", "3", *extra])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    return out, summary, {r["id"]: strip(r) for r in iter_shard_records(out)}


def assert_as_eval(evaluated: tuple[Path, dict[str, Any], dict[str, dict[str, Any]]], out: Path,
                   summary: dict[str, Any], recs: dict[str, dict[str, Any]]) -> None:
    tmp, eval_summary, eval_recs = evaluated
    assert list(recs) == list(eval_recs) or sorted(recs) == sorted(eval_recs)
    assert recs == eval_recs, differences(recs, eval_recs)
    finals = [r["correct_final"] for r in recs.values()]
    assert finals[0] is True and finals[1:] == [False, False, False]  # the script's answers, scored as eval does
    assert all(len(r["example_ids"]) == 8 for r in recs.values())
    for key in FIGURES:
        assert summary.get(key) == eval_summary.get(key), key
    assert summary["field_accuracy"].keys() == {"metrics", "group_by", "where", "order_by", "limit"}
    manifest = json.loads((out / "manifest.json").read_text())
    eval_manifest = json.loads((tmp / "eval" / "manifest.json").read_text())
    for key in ("answer", "prompt", "prompt_sha256", "guardrails", "examples", "link_values", "sampling",
                "evalset_sha256", "layer_sha256"):
        assert manifest[key] == eval_manifest[key], key
    assert manifest["answer"] == "query" and manifest["guardrails"] == ["learned:ranking", "sort", "values"]


def test_the_main_job_on_the_local_engine_writes_evals_records(
        evaluated: tuple[Path, dict[str, Any], dict[str, dict[str, Any]]]) -> None:
    out, summary, recs = batch_main_job(evaluated[0], "local")
    assert_as_eval(evaluated, out, summary, recs)
    assert summary["load"]["engine"] == "local" and summary["records"]["count"] == 4
    assert [s["rows"] for s in summary["records"]["shards"]] == [3, 1]


def test_the_main_job_on_ray_data_writes_evals_records(
        evaluated: tuple[Path, dict[str, Any], dict[str, dict[str, Any]]], monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray.data")
    out, summary, recs = batch_main_job(evaluated[0], "ray", "--actors", "2")
    assert_as_eval(evaluated, out, summary, recs)
    assert summary["load"]["engine"] == "ray" and summary["load"]["actors"] == 2


def test_a_gold_sql_set_runs_through_batch_as_through_eval(tmp_path: Path) -> None:
    """Golds stated as SQL: every record, and the set's column rule and search path, as eval's."""
    by_region = ("SELECT c.region, SUM(l.quantity * l.unit_price * (1 - l.discount)) AS revenue FROM order_lines l "
                 "LEFT JOIN customers c ON l.customer_id = c.customer_id GROUP BY c.region")
    units = ("SELECT c.region, SUM(l.quantity) AS units FROM order_lines l "
             "LEFT JOIN customers c ON l.customer_id = c.customer_id GROUP BY c.region")
    items = [{"id": "rev", "question": "Revenue by region", "gold_sql": by_region},
             {"id": "units", "question": "Units by region", "gold_sql": units},
             {"id": "nope", "question": "Revenue by weather", "gold_sql": None, "answerable": False}]
    gold = tmp_path / "gold.jsonl"
    gold.write_text("".join(json.dumps(r) + "\n" for r in items))
    answers = {"Revenue by region": by_region, "Units by region": by_region}
    by_q = {q: [{"kind": "text", "text": t}] for q, t in answers.items()}
    args = ["--answer", "sql", "--evalset", str(gold), "--model", MODEL, "--concurrency", "2"]
    with FakeServer(tmp_path / "fake-eval", script(by_question=by_q), model=MODEL) as f:
        res = runner.invoke(app, ["eval", *args, "--endpoint", f.url, "--out", str(tmp_path / "eval"),
                                  "--max-failure-rate", "1"])
    assert res.exit_code == 0, res.output
    with FakeServer(tmp_path / "fake-batch", script(by_question=by_q), model=MODEL) as f:
        res = runner.invoke(app, ["batch", "--engine", "local", *args, "--endpoint", f.url, "--format", "jsonl",
                                  "--out", str(tmp_path / "batch")])
    assert res.exit_code == 0, res.output
    want = {r["id"]: strip(r) for r in iter_records(tmp_path / "eval" / "records.jsonl")}
    got = {r["id"]: strip(r) for r in iter_shard_records(tmp_path / "batch")}
    assert got == want, differences(got, want)
    assert got["rev"]["correct_final"] is True and got["units"]["correct_final"] is False
    summary = json.loads((tmp_path / "batch" / "summary.json").read_text())
    eval_summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    for key in FIGURES:
        assert summary.get(key) == eval_summary.get(key), key
    assert summary["column_rule"] and summary["final_accuracy"]["k"] == 1
    manifest = json.loads((tmp_path / "batch" / "manifest.json").read_text())
    eval_manifest = json.loads((tmp_path / "eval" / "manifest.json").read_text())
    for key in ("gold", "column_rule", "search_path", "answer", "prompt", "evalset_sha256"):
        assert manifest[key] == eval_manifest[key], key
    assert manifest["gold"] == "sql"


@pytest.mark.parametrize(("cfg", "message"), [
    (BatchConfig(base=EvalConfig(answer="query", model=MODEL), engine="ray-vllm"),
     "--engine ray-vllm generates v1 intents only .* --answer query needs --engine local or ray"),
    (BatchConfig(base=EvalConfig(answer="sql", model=MODEL), engine="ray-vllm"), "--answer sql needs --engine local"),
    (BatchConfig(base=EvalConfig(model=MODEL, conditions=REGISTRY.from_options(examples=8, link_values="both")),
                 engine="ray-vllm"),
     "--engine ray-vllm does not apply conditions; drop --examples, --link-values"),
    (BatchConfig(base=EvalConfig(endpoint="http://127.0.0.1:9/v1", model=MODEL), engine="local", actors=2),
     "--engine local answers in this process: drop --actors"),
    (BatchConfig(base=EvalConfig(model=MODEL), engine="local"), "--engine local sends requests to an endpoint"),
])
def test_an_engine_refuses_by_name_what_it_cannot_apply(cfg: BatchConfig, message: str) -> None:
    with pytest.raises(InputError, match=message):
        check(cfg)


def test_ray_vllm_refuses_a_gold_sql_set_before_anything_starts(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    gold = tmp_path / "gold.jsonl"
    gold.write_text(json.dumps({"id": "a", "question": "Customers", "gold_sql": "SELECT 1 AS x"}) + "\n")
    out = tmp_path / "out"
    with pytest.raises(InputError, match="--engine ray-vllm scores v1 gold intents: a gold-SQL set needs"):
        run_batch(BatchConfig(base=EvalConfig(model=MODEL), engine="ray-vllm", input=str(gold), out=out))
    assert not out.exists()


@pytest.mark.parametrize("answer", ["intent", "sql"])
def test_the_local_engine_writes_evals_records_for_v1_intents_and_sql(answer: str, tmp_path: Path) -> None:
    """The other answer kinds on the local engine (the fake's default answers: v1 intents, which a
    SQL answer refuses to run): the same records and scored figures as eval's."""
    evalset = "heldout" if answer == "intent" else "heldout-v2"
    args = ["--answer", answer, "--evalset", evalset, "--limit", "4", "--model", MODEL, "--concurrency", "2"]
    with FakeServer(tmp_path / "fake-eval", script(), model=MODEL) as f:
        res = runner.invoke(app, ["eval", *args, "--endpoint", f.url, "--out", str(tmp_path / "eval"),
                                  "--max-failure-rate", "1"])
    assert res.exit_code == 0, res.output
    with FakeServer(tmp_path / "fake-batch", script(), model=MODEL) as f:
        res = runner.invoke(app, ["batch", "--engine", "local", *args, "--endpoint", f.url,
                                  "--out", str(tmp_path / "batch")])
    assert res.exit_code == 0, res.output
    want = {r["id"]: strip(r) for r in iter_records(tmp_path / "eval" / "records.jsonl")}
    got = {r["id"]: strip(r) for r in iter_shard_records(tmp_path / "batch")}
    assert got == want, differences(got, want)
    assert len(got) == 4 and {r.get("answer", "intent") for r in got.values()} == {answer}
    summary = json.loads((tmp_path / "batch" / "summary.json").read_text())
    eval_summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    for key in FIGURES:
        assert summary.get(key) == eval_summary.get(key), key


def test_a_local_batch_cut_short_is_resumed_to_the_same_records(tmp_path: Path) -> None:
    """A local batch whose driver died after its first shard (the second shard and the summary not
    written): ``--resume`` answers only the missing shard, and ends as the uninterrupted batch."""
    out = tmp_path / "batch"
    args = ["batch", "--engine", "local", "--evalset", "heldout", "--limit", "4", "--shard-rows", "2", "--model",
            MODEL, "--format", "jsonl", "--out", str(out)]
    with FakeServer(tmp_path / "fake", script(), model=MODEL) as f:  # (its endpoint is a resume key)
        res = runner.invoke(app, [*args, "--endpoint", f.url])
        assert res.exit_code == 0, res.output
        whole = [strip(r) for r in iter_shard_records(out)]
        whole_summary = json.loads((out / "summary.json").read_text())
        (out / "records" / "shard-000001.jsonl").unlink()
        (out / "summary.json").unlink()
        before = len(f.chat_requests())
        res = runner.invoke(app, [*args, "--endpoint", f.url, "--resume"])
        asked = [c["question"] for c in f.chat_requests()[before:]]
    assert res.exit_code == 0, res.output
    assert [strip(r) for r in iter_shard_records(out)] == whole
    assert sorted(asked) == sorted(r["question"] for r in whole[2:])  # the missing shard's items only
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resumed"] == {"sessions": 2, "shards_kept": 1}
    for key in FIGURES:
        assert summary.get(key) == whole_summary.get(key), key
