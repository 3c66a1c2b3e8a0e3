"""``tune`` against the session's real CPU vLLM (SmolLM2): a few scored probes end to end.

SmolLM2-135M is rarely right, so this pins the plumbing on a real engine — real latencies judged
against a per-request SLO, real scored records paired by McNemar, the search's probes, files
written — not an operating point's value (that is the offline simulated-engine test's job).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nlq2sql.load.modes import run_mode
from nlq2sql.load.tune_results import TuneResult
from nlq2sql.run.config import EvalConfig, LoadShape
from nlq2sql.run.server import LocalServer
from nlq2sql.transport.client import Sampling

pytestmark = pytest.mark.live


def test_tune_live(vllm_server: LocalServer, tmp_path: Path) -> None:
    out = tmp_path / "tune"
    base = EvalConfig(evalset="heldout", out=out, endpoint=vllm_server.url, model=vllm_server.model_name,
                      sampling=Sampling(max_tokens=32), load=LoadShape(metrics_interval_s=0.1))
    # The SLO is generous (a CPU server shared with other work), so every probe meets it and the
    # search goes c=1, c=4, then stops (the top is eligible) unless accuracy moved significantly.
    res = run_mode("tune", dict(base=base, slo=("e2e_p95<=120s",), hi=4, requests=6, warmup=0, probes=3), print)
    print((out / "tune.md").read_text())
    assert isinstance(res, TuneResult)
    probes = {p.load: p for p in res.probes}
    assert probes.keys() >= {1.0, 4.0} and len(probes) <= 3
    for p in probes.values():
        assert p.n == 6 and p.ok == 6 and p.slo_met
        assert p.correct_in_slo == p.correct  # every request was within the generous SLO
        assert 0 < p.slo_observed["e2e_p95<=120s"] < 120
        assert p.req_per_s > 0 and p.correct_goodput_per_s == pytest.approx(p.correct / p.wall_s)
        assert p.b_baseline_only + p.c_probe_only <= 6
    assert res.operating_point is not None  # c=1 met every bound (no --min-accuracy)
    saved = json.loads((out / "tune.json").read_text())
    assert saved["operating_point"] == res.operating_point.to_json() and (out / "tune.png").stat().st_size > 0
    ids = [json.loads(x)["id"] for x in (out / "probes" / "c1" / "records.jsonl").read_text().splitlines()]
    ids4 = [json.loads(x)["id"] for x in (out / "probes" / "c4" / "records.jsonl").read_text().splitlines()]
    assert sorted(ids) == sorted(ids4)  # the same items at every probe: McNemar pairs them
