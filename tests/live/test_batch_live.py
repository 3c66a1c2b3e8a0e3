"""End-to-end: ``nlq2sql batch --engine ray-vllm`` runs SmolLM2 inside Ray Data (``ray.data.llm``
on the CPU build of vLLM, no server) with per-row structured outputs, and writes the records
``eval`` writes.

In a subprocess: a fresh local Ray with every CPU (the vLLM engine takes one whole CPU
bundle), whatever Ray other tests in this session started.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from retail import retail_wh

from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.run.batch_shards import iter_shard_records
from nlq2sql.semantic import open_warehouse
from nlq2sql.stages.evalset import load_evalset
from nlq2sql.stages.pipeline import make_executor
from nlq2sql.stages.score import case_record

pytest.importorskip("ray.data.llm")


#: What a ``transport.stream.Completion`` puts in a record (``run.item.request_part``).
COMPLETION_KEYS = ("outcome", "finish_reason", "http_status", "error", "attempts", "latency_s", "ttft_s",
                   "itl_mean_s", "itl_max_s", "chunks", "prompt_tokens", "completion_tokens", "cached_tokens",
                   "retry_waits_s", "unsent_retries")


def eval_record_keys() -> set[str]:
    """The keys ``ItemRunner`` gives a record of one endpoint (no examples, no planner)."""
    wh = open_warehouse("retail")
    with make_executor(wh) as ex:
        rec = case_record(load_evalset("heldout", retail_wh()).cases[0], None, [], ex, catalog=wh.catalog)
    return set(rec.to_json(version=False)) | set(COMPLETION_KEYS) | {"record_version", "started", "concurrency",
                                                                          "whitespace_chars", "chars"}


def test_batch_ray_vllm_answers_with_structured_outputs(tmp_path: Path) -> None:
    out = tmp_path / "batch"
    res = subprocess.run([sys.executable, "-m", "nlq2sql.cli", "batch", "--engine", "ray-vllm", "--evalset",
                          "heldout", "--limit", "6", "--shard-rows", "4", "--format", "jsonl", "--concurrency", "4",
                          "--out", str(out), "--json"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads(res.stdout)
    recs = list(iter_shard_records(out))
    assert [r["id"] for r in recs] == [c.id for c in load_evalset("heldout", retail_wh()).cases[:6]]
    assert [s["rows"] for s in summary["records"]["shards"]] == [4, 2]
    assert set(recs[0]) == eval_record_keys()
    for r in recs:
        assert r["outcome"] == "ok" and r["completion_tokens"] > 0 and r["prompt_tokens"] > 0
        assert r["latency_s"] is not None and r["latency_s"] > 0
        # The grammar (compact, as the local server's): an answer that stopped is schema-valid
        # and has no whitespace outside strings.
        if r["finish_reason"] == "stop":
            assert r["raw_intent"] is not None and r["whitespace_chars"] == 0, r["raw_text"]
    assert summary["n"] == 6 and summary["scored"] is True
    assert summary["schema_valid_rate"]["k"] == sum(r["raw_intent"] is not None for r in recs)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["engine"] == "ray-vllm" and manifest["model"] == "smollm2-135m" and manifest["endpoint"] is None
