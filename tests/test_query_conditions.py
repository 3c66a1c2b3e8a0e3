"""The conditions ported to the v2 answer (``--answer query``): worker engines, value linking,
self-consistency, ``--abstain-below``, guardrails on MetricFlow queries -- each on the fault
suite's fake server (deterministic scripted answers), v1 records unchanged elsewhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fakeserver import FakeServer, script

from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.records.store import iter_records
from nlq2sql.run.config import EvalConfig, LoadShape
from nlq2sql.run.live import run_eval

MODEL = "fake-model"
TIMING = {"latency_s", "ttft_s", "itl_mean_s", "itl_max_s", "started", "chunks", "attempts", "retry_waits_s"}
HELDOUT_V2 = PROJECT_ROOT / "evalsets" / "heldout-v2.jsonl"
UNANSWERABLE = PROJECT_ROOT / "evalsets" / "unanswerable.jsonl"


def lines(path: Path, n: int) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()[:n]]


def v2_set(tmp: Path) -> tuple[Path, list[dict[str, Any]]]:
    """Eight answerable items and three unanswerable ones of retail's shipped v2 sets."""
    items = lines(HELDOUT_V2, 8) + lines(UNANSWERABLE, 3)
    path = tmp / "v2.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in items))
    return path, items


def results(out: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: {k: v for k, v in r.items() if k not in TIMING} for r in iter_records(out / "records.jsonl")}


def scripted_answers(items: list[dict[str, Any]]) -> dict[str, str]:
    """Gold for even items, the first item's gold for odd ones, an abstention for one unanswerable
    item and a (wrong) query for the others: right, wrong and abstained answers all occur."""
    out = {}
    for i, it in enumerate(items):
        if it["gold"] is None:
            out[it["question"]] = (json.dumps({"unanswerable": "no such data"}) if i % 2 else
                                   json.dumps(items[0]["gold"]))
        else:
            out[it["question"]] = json.dumps(it["gold"] if i % 2 == 0 else items[0]["gold"])
    return out


def run_v2(tmp: Path, name: str, evalset: Path, answers: dict[str, str], **kw: Any) -> dict[str, Any]:
    with FakeServer(tmp / f"fake-{name}", script(answers=answers), model=MODEL, delay_s=0.02) as f:
        return run_eval(EvalConfig(evalset=str(evalset), out=tmp / name, endpoint=f.url, model=MODEL,
                                   answer="query", concurrency=4, timeout_s=30.0,
                                   load=LoadShape(metrics_interval_s=0.1), **({"guardrails": ()} | kw)))


def test_workers_write_the_records_one_process_writes_for_the_v2_answer(tmp_path: Path) -> None:
    """``--workers 2 --answer query``: the answer kind travels to the workers, and each record
    (scored by rows, abstentions judged) equals the in-process run's."""
    evalset, items = v2_set(tmp_path)
    answers = scripted_answers(items)
    one = run_v2(tmp_path, "single", evalset, answers)
    two = run_v2(tmp_path, "workers", evalset, answers, workers=2)
    single, got = results(tmp_path / "single"), results(tmp_path / "workers")
    assert got.keys() == single.keys() and len(got) == len(items)
    for item_id, rec in single.items():
        assert got[item_id] == rec, item_id
    assert {r["answer"] for r in got.values()} == {"query"}
    assert one["final_accuracy"] == two["final_accuracy"] and 0 < one["final_accuracy"]["k"] < len(items)
    assert one["abstention"] == two["abstention"] and two["abstention"]["abstained"] >= 1
    manifest = json.loads((tmp_path / "workers" / "manifest.json").read_text())
    assert manifest["answer"] == "query" and manifest["engine"]["workers"] == 2
