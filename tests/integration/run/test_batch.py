"""``nlq2sql batch``: Ray Data shards hold the records ``eval`` writes, the summary is eval's,
a question file without gold is answered in the same record schema, and bad input leaves
nothing behind.

Against the fault suite's fake server (deterministic answers, a scripted 500 so the shared
retry budget is used, a context overflow); one local Ray (2 CPUs) for the whole module.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, by_ids, script
from retail import retail_wh
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.records.store import iter_records
from nlq2sql.run.batch import run_batch
from nlq2sql.run.batch_config import BatchConfig
from nlq2sql.run.batch_shards import iter_shard_records
from nlq2sql.run.config import EvalConfig, LoadShape
from nlq2sql.run.endpoints import ReplicaSpec
from nlq2sql.run.live import run_eval
from nlq2sql.stages.evalset import load_evalset
from nlq2sql.transport.client import Sampling

pytest.importorskip("ray.data")

MODEL = "fake-model"
#: Fields that measure time or effort, not results (as in test_workers).
TIMING = {"latency_s", "ttft_s", "itl_mean_s", "itl_max_s", "started", "chunks", "attempts", "retry_waits_s",
          "sql_exec_s"}
SPEC = {"ho-003": ["500", "ok"], "ho-010": ["context_overflow"]}
N, SHARD = 20, 8
#: Summary figures that are results (the rest measure time).
FIGURES = ("n", "raw_accuracy", "final_accuracy", "execution_accuracy", "schema_valid_rate", "interventions",
           "intervention_precision", "intervention_recall", "majority_baseline", "field_accuracy", "status_counts",
           "error_taxonomy_raw", "error_taxonomy_final", "finish_reasons", "confusion_matrix", "per_category",
           "outcomes", "errors_by_class", "retries_used")


def fake(tmp: Path, name: str) -> FakeServer:
    """A fresh fake (its scripted faults are consumed per question)."""
    return FakeServer(tmp / f"fake-{name}", script(by_question=by_ids("heldout", SPEC)), model=MODEL, delay_s=0.02)


def strip(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in rec.items() if k not in TIMING}


@pytest.fixture(scope="module")
def ray_env(cache_root: Path, small_warehouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The private cache for the whole module (Ray's workers inherit it when Ray starts here)."""
    import ray

    from nlq2sql.run.ray_engine import RayEngine

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NLQ2SQL_CACHE_DIR", str(cache_root))
        started = not ray.is_initialized()
        RayEngine(None)  # a local Ray, as `eval --engine ray` starts it
        try:
            yield tmp_path_factory.mktemp("batch")
        finally:
            if started:
                ray.shutdown()


@pytest.fixture(scope="module")
def evaluated(ray_env: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """``eval`` of the same items, in one process, against an identical fresh fake."""
    with fake(ray_env, "eval") as f:
        summary = run_eval(EvalConfig(evalset="heldout", out=ray_env / "eval", endpoint=f.url, model=MODEL, limit=N,
                                      concurrency=4, timeout_s=10.0,
                                      load=LoadShape(metrics_interval_s=0.1))).to_json()
    return summary, {r["id"]: r for r in iter_records(ray_env / "eval" / "records.jsonl")}


def batch_config(url: str, out: Path, **kw: Any) -> BatchConfig:
    base = EvalConfig(endpoint=url, model=MODEL, limit=N, timeout_s=10.0, sampling=Sampling(max_tokens=128))
    return BatchConfig(**{"base": base, "input": "heldout", "out": out, "shard_rows": SHARD, "concurrency": 4,
                          "actors": 2, **kw})


@pytest.mark.slow  # a local Ray (the module's ray_env)
@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_batch_writes_the_records_and_summary_eval_writes(
        fmt: str, ray_env: Path, evaluated: tuple[dict[str, Any], dict[str, dict[str, Any]]]) -> None:
    eval_summary, eval_recs = evaluated
    out = ray_env / f"batch-{fmt}"
    with fake(ray_env, f"batch-{fmt}") as f:
        summary = run_batch(batch_config(f.url, out, format=fmt)).to_json()
    shards = sorted((out / "records").iterdir())
    assert [p.suffix for p in shards] == [f".{fmt}"] * 3
    assert [s["rows"] for s in summary["records"]["shards"]] == [8, 8, 4]
    recs = list(iter_shard_records(out))
    assert [r["id"] for r in recs] == [c.id for c in load_evalset("heldout", retail_wh()).cases[:N]]  # in item order
    assert {r["id"]: strip(r) for r in recs} == {i: strip(r) for i, r in eval_recs.items()}
    assert recs[0].keys() == eval_recs[recs[0]["id"]].keys()
    got = {r["id"]: r for r in recs}
    assert got["ho-010"]["outcome"] == "context_overflow" and got["ho-003"]["outcome"] == "ok"
    assert len(got["ho-003"]["retry_waits_s"]) == 1  # its 500, retried once on the shared budget
    for key in FIGURES:
        if key == "majority_baseline":  # a tie goes to the kind seen first: eval's order is completion order
            assert {**summary[key], "label": None} == {**eval_summary[key], "label": None}
        else:
            assert summary[key] == eval_summary[key], key
    assert summary["scored"] is True and summary["records"]["count"] == N
    assert summary["throughput"]["items_this_session"] == N
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "batch" and manifest["evalset"] == "heldout" and manifest["n_items"] == N
    assert manifest["format"] == fmt and manifest["shard_rows"] == SHARD and manifest["finished"]
    assert json.loads((out / "summary.json").read_text())["records"] == summary["records"]
    # The digest hashes the records' lines (RecordWriter's encoding) in shard order, in either format.
    lines = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in recs)
    assert hashlib.sha256(lines.encode()).hexdigest() == summary["records"]["sha256"]
    assert not list(ray_env.glob(".batch-*.partial-*"))
    if fmt == "parquet":
        import pyarrow.parquet as pq

        assert pq.read_table(shards[0]).column_names == ["id", "record"]
    else:  # JSONL shards are records files: eval's reader reads them
        assert [r["id"] for r in iter_records(shards[0])] == [r["id"] for r in recs[:8]]


@pytest.mark.slow  # a local Ray (the module's ray_env)
def test_a_question_file_is_answered_in_the_same_record_schema(
        ray_env: Path, evaluated: tuple[dict[str, Any], dict[str, dict[str, Any]]]) -> None:
    _, eval_recs = evaluated
    cases = load_evalset("heldout", retail_wh()).cases[:4]
    qfile = ray_env / "questions.jsonl"
    qfile.write_text("".join(json.dumps({"id": f"q{i}", "question": c.question}) + "\n" for i, c in enumerate(cases)))
    out = ray_env / "answers"
    with fake(ray_env, "questions") as f:
        res = CliRunner().invoke(app, ["batch", "--questions", str(qfile), "--endpoint", f.url, "--model", MODEL,
                                       "--out", str(out), "--format", "jsonl", "--shard-rows", "3",
                                       "--concurrency", "2"])
    assert res.exit_code == 0, res.output
    assert "not scored" in res.output and "4 records in 2 jsonl shards" in res.output
    recs = {r["id"]: r for r in iter_shard_records(out)}
    assert list(recs) == ["q0", "q1", "q2", "q3"]
    for i, c in enumerate(cases):
        rec, scored = recs[f"q{i}"], eval_recs[c.id]
        assert rec.keys() == scored.keys()  # one record schema
        assert rec["gold_intent"] is None and rec["correct_raw"] is None and rec["correct_exec"] is None
        if scored["outcome"] == "ok":  # the same question, the same answer, the same SQL and rows
            for k in ("raw_text", "raw_intent", "final_intent", "status", "sql", "params", "result_hash",
                      "result_head"):
                assert rec[k] == scored[k], (c.id, k)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scored"] is False and summary["n"] == 4 and "raw_accuracy" not in summary
    assert summary["schema_valid_rate"]["k"] == sum(r["raw_intent"] is not None for r in recs.values())
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["questions"] == "questions.jsonl" and "evalset" not in manifest


@pytest.mark.parametrize(("args", "message"), [
    (["--evalset", "no-such-set"], "no eval set named 'no-such-set'"),
    (["--questions", "{qfile}"], "{qfile}:2: malformed JSON"),
    (["--questions", "{gold}"], "{gold}:1: field 'gold': unknown key 'gold'"),
    (["--evalset", "heldout", "--questions", "{qfile}"], "give one of --evalset"),
    (["--evalset", "heldout", "--format", "csv"], "unknown format 'csv'"),
    (["--evalset", "heldout", "--shard-rows", "0"], "--shard-rows: must be at least 1"),
    (["--evalset", "heldout", "--engine", "spark"], "unknown engine 'spark'"),
])
def test_bad_input_exits_2_and_leaves_nothing(args: list[str], message: str, tmp_path: Path) -> None:
    qfile, gold = tmp_path / "q.jsonl", tmp_path / "gold.jsonl"
    qfile.write_text('{"id": "a", "question": "revenue by region"}\n{"id": "b", "question": \n')
    gold.write_text(load_evalset("heldout", retail_wh()).cases[0].model_dump_json() + "\n")
    out = tmp_path / "out"
    args = [a.format(qfile=qfile, gold=gold) for a in args]
    res = CliRunner().invoke(app, ["batch", *args, "--endpoint", "http://127.0.0.1:9/v1", "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert message.format(qfile=qfile, gold=gold) in " ".join(res.output.split())
    assert len(res.output.strip().splitlines()) == 1
    assert not out.exists() and not list(tmp_path.glob(".out*"))


def test_an_unreachable_endpoint_and_a_taken_out_dir_exit_2(tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["batch", "--evalset", "heldout", "--endpoint", "http://127.0.0.1:9/v1",
                                   "--out", str(out)])
    assert res.exit_code == 2 and "unreachable" in res.output and not out.exists()
    out.mkdir()
    (out / "keep").write_text("x")
    with FakeServer(tmp_path / "fake", script(), model=MODEL) as f:
        res = CliRunner().invoke(app, ["batch", "--evalset", "heldout", "--endpoint", f.url, "--model", MODEL,
                                       "--out", str(out)])
    assert res.exit_code == 2 and "--force" in res.output and (out / "keep").exists()


def sql_script(tmp: Path, name: str) -> FakeServer:
    """A fake whose answers are SQL: the gold's own for two items, a file read, prose (v2 golds)."""
    from nlq2sql.answers.sql.solved import solve
    from nlq2sql.semantic import open_warehouse
    from nlq2sql.stages.pipeline import make_executor
    from nlq2sql.stages.queryset import load_query_set

    wh = open_warehouse("retail")
    cases = [c for c in load_query_set("heldout-v2", wh.catalog).cases if c.gold is not None][:4]
    with make_executor(wh) as ex:
        solved = solve([c.gold for c in cases[:2]], wh.catalog, wh, ex)
    texts = [s.sql for s in solved if s] + [f"SELECT * FROM read_csv('{tmp / 'secret.csv'}')", "Revenue went up."]
    assert len(texts) == 4
    by_q = {c.question: [{"kind": "text", "text": t}] for c, t in zip(cases, texts, strict=True)}
    return FakeServer(tmp / f"fake-{name}", script(by_question=by_q), model=MODEL, delay_s=0.02)


def unordered_head(rec: dict[str, Any]) -> dict[str, Any]:
    """A gold without ORDER BY comes back from DuckDB in any order: its head rows as a sorted list
    (``gold_result_hash`` is order-free already)."""
    head = rec.get("gold_result_head")
    return rec if not head else {**rec, "gold_result_head": sorted(head, key=json.dumps)}


@pytest.mark.slow  # a local Ray (the module's ray_env)
def test_batch_answers_sql_as_eval_does_and_sql_grammar_records_its_grammar(ray_env: Path) -> None:
    """Issue 23: ``batch --answer sql`` writes the records ``eval --answer sql`` writes for the same
    items; ``--answer sql-grammar`` sends the grammar's probe before any item and records the grammar
    in the manifest as eval does."""
    from nlq2sql.answers.sql.grammar import sql_grammar
    from nlq2sql.semantic import open_warehouse

    (ray_env / "secret.csv").write_text("TOPSECRET-42\n")
    base = ["--evalset", "heldout-v2", "--model", MODEL, "--limit", "4", "--concurrency", "2"]
    with sql_script(ray_env, "eval-sql") as f:
        res = CliRunner().invoke(app, ["eval", "--answer", "sql", *base, "--endpoint", f.url,
                                       "--out", str(ray_env / "eval-sql")])
    assert res.exit_code == 0, res.output
    evaluated = {r["id"]: unordered_head(strip(r)) for r in iter_records(ray_env / "eval-sql" / "records.jsonl")}
    eval_summary = json.loads((ray_env / "eval-sql" / "summary.json").read_text())
    for answer in ("sql", "sql-grammar"):
        out = ray_env / f"batch-{answer}"
        with sql_script(ray_env, f"batch-{answer}") as f:
            res = CliRunner().invoke(app, ["batch", "--answer", answer, *base, "--endpoint", f.url, "--out", str(out),
                                           "--shard-rows", "2", "--json"])
            chats = f.chat_requests()
        assert res.exit_code == 0, res.output
        recs = {r["id"]: unordered_head(strip(r)) for r in iter_shard_records(out)}
        summary = json.loads((out / "summary.json").read_text())
        manifest = json.loads((out / "manifest.json").read_text())
        assert summary["answer"] == manifest["answer"] == answer and manifest["prompt"] == "sql"
        assert [r["status"] for r in recs.values()][2:] == ["sql_refused", "unparsable"]
        assert summary["final_accuracy"] == eval_summary["final_accuracy"] and summary["final_accuracy"]["k"] == 2
        if answer == "sql":
            differ = {i: sorted(k for k in recs[i].keys() | evaluated[i].keys()
                                if recs[i].get(k) != evaluated[i].get(k)) for i in recs}
            assert recs == evaluated, differ  # the same records as eval's, timings aside
            assert manifest["sampling"]["structured"] == "none" and len(chats) == 4
        else:
            wh = open_warehouse("retail")
            g = sql_grammar(wh.catalog, wh)
            assert {r["answer"] for r in recs.values()} == {"sql-grammar"}
            assert (manifest["sampling"]["grammar"], manifest["sampling"]["grammar_sha256"]) == (g.text, g.sha256)
            probe, *items = chats  # the grammar's probe first, then one request per item
            assert probe["question"] == "Write one SQL SELECT statement." and len(items) == 4
        assert "TOPSECRET-42" not in "".join(json.dumps(r) for r in recs.values())


@pytest.mark.parametrize(("args", "message"), [
    (["--answer", "sql", "--questions", "{qfile}"], "not available with --answer sql: --questions"),
    (["--answer", "sql-grammar", "--evalset", "heldout-v2", "--guardrails", "ranking"], "--guardrails"),
    (["--answer", "v3", "--evalset", "heldout-v2"], "unknown answer kind 'v3' (known: intent, query"),
])
def test_an_answer_with_an_option_it_cannot_take_exits_2_before_any_request(args: list[str], message: str,
                                                                              tmp_path: Path) -> None:
    qfile = tmp_path / "q.jsonl"
    qfile.write_text('{"id": "a", "question": "revenue by region"}\n')
    out = tmp_path / "out"
    with FakeServer(tmp_path / "fake", script(), model=MODEL) as f:
        res = CliRunner().invoke(app, ["batch", *[a.format(qfile=qfile) for a in args], "--endpoint", f.url,
                                       "--model", MODEL, "--out", str(out)])
        assert not f.chat_requests()
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split()) and len(res.output.strip().splitlines()) == 1
    assert not out.exists()


def test_a_grammar_the_server_refuses_is_one_error_before_any_item(tmp_path: Path) -> None:
    refusing = {"default": {"kind": "status", "status": 400}}  # every chat request: HTTP 400
    out = tmp_path / "out"
    with FakeServer(tmp_path / "fake", script(**refusing), model=MODEL) as f:
        res = CliRunner().invoke(app, ["batch", "--answer", "sql-grammar", "--evalset", "heldout-v2", "--endpoint",
                                       f.url, "--model", MODEL, "--out", str(out)])
        chats = f.chat_requests()
    assert res.exit_code == 2, res.output
    assert "refuses the warehouse's SQL grammar" in res.output and "HTTP 400" in res.output
    assert [c["question"] for c in chats] == ["Write one SQL SELECT statement."]  # the probe, no item
    assert not out.exists()


def test_ray_vllm_takes_no_sql_answer() -> None:
    from nlq2sql.errors import InputError
    from nlq2sql.run.batch_config import check

    with pytest.raises(InputError, match="--engine ray-vllm generates v1 intents only .*: --answer sql needs"):
        check(BatchConfig(base=EvalConfig(answer="sql", model=MODEL), engine="ray-vllm"))


@pytest.mark.slow  # a local Ray (the module's ray_env)
def test_a_batch_over_two_replicas_lists_them_and_its_records_name_them(ray_env: Path) -> None:
    """Issue 27: ``batch`` lists its replicas in the manifest, labelled as its records name them."""
    out = ray_env / "batch-fleet"
    with fake(ray_env, "r0") as a, fake(ray_env, "r1") as b:
        summary = run_batch(batch_config(a.url, out, base=EvalConfig(
            endpoint=a.url, replicas=(ReplicaSpec(b.url),), model=MODEL, limit=8, timeout_s=10.0,
            routing="round-robin"))).to_json()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["routing"] == "round-robin"
    assert manifest["replicas"] == [{"label": "r0", "url": a.url, "model": MODEL},
                                    {"label": "r1", "url": b.url, "model": MODEL}]
    assert {r["replica"] for r in iter_shard_records(out)} == {"r0", "r1"}
    assert sum(summary["replicas_answered"].values()) == 8
