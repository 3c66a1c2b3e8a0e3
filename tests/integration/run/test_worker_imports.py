"""A worker process pays only for what it uses: the openai SDK is never loaded by one.

``test_client.test_workers_do_not_load_the_openai_sdk`` checks the import of the worker modules;
this one checks a worker's whole life in a fresh interpreter -- the worker body answering items
through ``ItemWorker`` against the fake server, with a retried HTTP 500, a reset stream and a
timeout among them (error classification must not pull the SDK in either).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fakeserver import FakeServer, by_ids, script

from nlq2sql.paths import PROJECT_ROOT

MODEL = "fake-model"
SPEC = {"ho-001": ["500", "ok"], "ho-002": ["reset"], "ho-003": ["hang"]}

#: What a spawned worker does (``worker.serve_items`` -> ``ItemWorker``), minus the pipe.
WORKER = """
import asyncio, json, sys
from nlq2sql.run.worker import ItemWorker
from nlq2sql.run.config import EvalConfig
from nlq2sql.semantic.binding import open_warehouse
from nlq2sql.stages.evalset import load_evalset
from nlq2sql.transport.client import RetryBudget

url = sys.argv[1]
cases = list(load_evalset("heldout", open_warehouse("retail")).cases[:6])
cfg = EvalConfig(evalset="heldout", endpoint=url, model="fake-model", limit=6, concurrency=3, timeout_s=1.5,
                 retry_budget=0.5)

async def main():
    w = ItemWorker(cfg, (url, "fake-model", ""), 3, RetryBudget(6, 0.5), cases)
    w.start()
    recs = await asyncio.gather(*(w.run(c) for c in cases))
    await w.finish()
    return recs

recs = asyncio.run(main())
print(json.dumps({"outcomes": {r.id: [r.outcome, r.request.attempts] for r in recs},
                  "loaded": sorted(m for m in ("openai", "scipy", "sklearn", "matplotlib", "ray")
                                   if m in sys.modules)}))
"""


def test_a_worker_answering_items_never_loads_the_openai_sdk(tmp_path: Path) -> None:
    with FakeServer(tmp_path / "fake", script(by_question=by_ids("heldout", SPEC)), model=MODEL) as f:
        out = subprocess.run([sys.executable, "-c", WORKER, f.url], capture_output=True, text=True, timeout=180,
                             cwd=PROJECT_ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # The errors really happened (their classification ran), and every item was answered once.
    assert [got["outcomes"][i] for i in SPEC] == [["ok", 2]] * 3  # each failed once, then was retried
    assert len(got["outcomes"]) == 6
    assert got["loaded"] == [], f"a worker loaded {got['loaded']}"
