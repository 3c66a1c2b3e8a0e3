"""End-to-end: a real CPU vLLM with SmolLM2 answers held-out items through ``nlq2sql eval``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from nlq2sql.records.store import iter_records
from nlq2sql.run.config import EvalConfig, LoadShape
from nlq2sql.run.live import run_eval
from nlq2sql.run.server import LocalServer
from nlq2sql.transport.client import Sampling


def _records(out: Path) -> list[dict]:
    return list(iter_records(out / "records.jsonl"))


def test_eval_heldout_concurrent(vllm_server: LocalServer, tmp_path: Path) -> None:
    out = tmp_path / "run"
    cfg = EvalConfig(evalset="heldout", out=out, endpoint=vllm_server.url,
                     model=vllm_server.model_name, concurrency=8, limit=24,
                     sampling=Sampling(max_tokens=160), load=LoadShape(metrics_interval_s=0.1))
    summary = run_eval(cfg).to_json()
    recs = _records(out)
    ids = [r["id"] for r in recs]
    assert len(ids) == 24 and len(set(ids)) == 24
    assert all(r["outcome"] == "ok" for r in recs), [r["error"] for r in recs if r["outcome"] != "ok"]
    # Structured outputs constrain the shape: every answer that finished is schema-valid;
    # one cut at max_tokens is classified as truncated, never silently accepted.
    for r in recs:
        if r["finish_reason"] == "stop":
            assert r["raw_intent"] is not None, r["raw_text"]
        elif r["raw_intent"] is None:
            assert r["status"] == "truncated", r
    assert sum(r["raw_intent"] is not None for r in recs) >= 20
    for r in recs:
        assert r["latency_s"] > 0 and r["ttft_s"] is not None and 0 < r["ttft_s"] <= r["latency_s"]
        assert r["completion_tokens"] and r["prompt_tokens"]
        assert r["finish_reason"] in ("stop", "length")
    # The summary agrees with the records it was derived from.
    assert summary["n"] == 24
    assert summary["raw_accuracy"]["k"] == sum(r["correct_raw"] for r in recs)
    assert summary["final_accuracy"]["k"] == sum(r["correct_final"] for r in recs)
    assert summary["schema_valid_rate"]["k"] == sum(r["raw_intent"] is not None for r in recs)
    assert summary["timing"]["latency_s"]["n"] == 24
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["raw_accuracy"] == summary["raw_accuracy"]
    # The server itself saw concurrent work (measured, not assumed).
    sm = summary["server_metrics"]
    assert sm["observed"] and sm["samples"] > 3
    assert sm["running"]["peak"] > 1, sm
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["server"]["max_model_len"] == 2048
    assert manifest["server"]["server_version"]
    assert manifest["model"] == vllm_server.model_name


def test_eval_resume_after_kill(vllm_server: LocalServer, tmp_path: Path) -> None:
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "nlq2sql.cli", "eval", "--evalset", "heldout",
           "--endpoint", vllm_server.url, "--model", vllm_server.model_name,
           "--concurrency", "2", "--limit", "20", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 120
    records = out / "records.jsonl"
    while time.time() < deadline:
        if records.exists() and records.read_bytes().count(b"\n") >= 4:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = len(_records(out))
    assert 4 <= before < 20, before
    done = subprocess.run([*cmd, "--resume"], capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr
    ids = [r["id"] for r in _records(out)]
    assert sorted(ids) == sorted(set(ids)) and len(ids) == 20
    # A resume with different inputs is refused, saying what differs.
    bad = subprocess.run([*cmd[:-2], "--out", str(out), "--resume", "--prompt", "contrastive"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "prompt_sha256" in bad.stderr
