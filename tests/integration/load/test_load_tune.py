"""``tune``: SLO parsing, the search, and end to end on a simulated engine whose answers degrade
above a load (the fake server answers the gold intent while fewer than K requests are in flight,
a wrong one from K on): the operating point must land below K, and a resumed tune must equal an
uninterrupted one."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, script
from retail import retail_wh
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.errors import InputError
from nlq2sql.load.modes import run_mode
from nlq2sql.load.slo import parse_slo
from nlq2sql.load.tune import Probe, TuneSettings, bisect_next, judge, probe_from_records
from nlq2sql.load.tune_results import TuneResult
from nlq2sql.records.item import ItemRecord
from nlq2sql.run.config import EvalConfig
from nlq2sql.stages.evalset import load_evalset

K = 4  # the simulated engine answers correctly only while fewer than K requests are in flight
DELAY = 0.15


def _degrading_script() -> dict[str, Any]:
    answers, wrong = {}, {}
    for c in load_evalset("dev", retail_wh()).cases:
        gold = c.gold.model_dump(mode="json")  # type: ignore[union-attr]
        answers[c.question] = json.dumps(gold)
        bad = dict(gold, metric="orders" if gold.get("metric") != "orders" else "revenue")
        wrong[c.question] = json.dumps(bad)
    return script(answers=answers, wrong=wrong, correct_below=K)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeServer]:
    with FakeServer(tmp_path_factory.mktemp("degrading"), _degrading_script(), delay_s=DELAY) as f:
        yield f


def _tune(engine: FakeServer, out: Path, **kw: Any) -> TuneResult:
    base = EvalConfig(evalset="dev", out=out, endpoint=engine.url, model="fake-model")
    values: dict[str, Any] = {"base": base, "slo": ("e2e_p95<=20s",), "hi": 16, "requests": 20, "warmup": 0,
                              "probes": 6, "min_accuracy": 0.5}
    res = run_mode("tune", values | kw)
    assert isinstance(res, TuneResult)
    return res


def test_slo_grammar() -> None:
    assert parse_slo("e2e_p95<=8s").limit_s == 8 and parse_slo("ttft_p99<=500ms").limit_s == 0.5
    assert parse_slo("itl_p50 <= 0.2").pct == 50
    for bad in ("e2e<=8s", "latency_p95<=8s", "e2e_p95>=8s", "e2e_p95<=0s", "e2e_p95<=-1s"):
        with pytest.raises(InputError) as exc:
            parse_slo(bad)
        assert exc.value.field == "--slo"


@pytest.mark.parametrize("kw, field", [
    ({"slo": ()}, "--slo"), ({"min_accuracy": 1.5}, "--min-accuracy"), ({"hi": 1}, "--hi"),
    ({"by": "rate", "lo": 2.0, "hi": 1.0}, "--hi"), ({"requests": 0}, "--requests"), ({"probes": 1}, "--probes"),
    ({"by": "load"}, "--by"),
])
def test_settings_refusals_name_the_option(tmp_path: Path, kw: dict[str, Any], field: str) -> None:
    values = {"base": EvalConfig(out=tmp_path / "o"), "slo": ("e2e_p95<=8s",)} | kw
    with pytest.raises(InputError) as exc:
        TuneSettings(**values)
    assert exc.value.field == field
    assert not (tmp_path / "o").exists()


def _probe(load: float, right: int, n: int = 40, slo_met: bool = True, wall: float = 10.0) -> Probe:
    items = {f"q{i}": i < right for i in range(n)}
    return Probe(load=load, run_dir="x", n=n, ok=n, correct=right, correct_in_slo=right, wall_s=wall,
                 req_per_s=n / wall, goodput_per_s=right / wall, correct_goodput_per_s=right / wall,
                 correct_goodput_ci95=None, accuracy=right / n, accuracy_ci95=None, slo_observed={},
                 slo_met=slo_met, items=items)


def test_bisection_and_mcnemar_on_synthetic_probes(tmp_path: Path) -> None:
    s = TuneSettings(base=EvalConfig(out=tmp_path), slo=("e2e_p95<=8s",), hi=16, probes=8)
    assert bisect_next(s, []) == 1
    base = _probe(1, 36)
    assert bisect_next(s, [base]) == 16
    assert judge(_probe(16, 20), base, s).significantly_worse  # 16 items lost, none gained
    assert not judge(_probe(4, 34), base, s).significantly_worse  # 2 lost: within noise
    assert bisect_next(s, [base, _probe(16, 20)]) == 4  # geometric midpoint of 1 and 16
    assert bisect_next(s, [base, _probe(16, 20), _probe(4, 36)]) == 8
    assert bisect_next(s, [base, _probe(16, 20), _probe(4, 36), _probe(8, 36, slo_met=False)]) == 6
    assert bisect_next(s, [base, _probe(16, 36)]) is None  # the top is eligible: nothing to search
    assert bisect_next(s, [_probe(1, 36, slo_met=False)]) is None  # not even c=1 meets the SLO


def test_correct_goodput_counts_correct_answers_within_every_slo() -> None:
    slos = (parse_slo("e2e_p95<=2s"), parse_slo("ttft_p95<=0.5s"))
    recs = [{"id": "a", "outcome": "ok", "raw_intent": {}, "correct_final": True, "latency_s": 1.0, "ttft_s": 0.1},
            {"id": "b", "outcome": "ok", "raw_intent": {}, "correct_final": True, "latency_s": 3.0, "ttft_s": 0.1},
            {"id": "c", "outcome": "ok", "raw_intent": {}, "correct_final": True, "latency_s": 1.0, "ttft_s": 0.9},
            {"id": "d", "outcome": "ok", "raw_intent": {}, "correct_final": False, "latency_s": 0.5, "ttft_s": 0.1}]
    items = [ItemRecord.from_json({"question": "q", **r}) for r in recs]
    p = probe_from_records(2, Path("x"), items, 2.0, slos, open_loop=False)
    assert (p.correct, p.correct_in_slo) == (3, 1)
    assert p.goodput_per_s == pytest.approx(1.5) and p.correct_goodput_per_s == pytest.approx(0.5)
    lo, hi = p.correct_goodput_ci95 or (0, 0)
    assert lo < 0.5 < hi <= 2.0
    assert not p.slo_met  # the observed e2e p95 is above 2 s


def _digest(d: Path) -> str:
    return hashlib.sha256((d / "records.jsonl").read_bytes()).hexdigest()


def test_operating_point_lands_below_the_degradation(engine: FakeServer, tmp_path: Path) -> None:
    res = _tune(engine, tmp_path / "full")
    op = res.operating_point
    assert op is not None and op.load < K, res.probes
    probes = {p.load: p for p in res.probes}
    assert probes[1].accuracy == 1.0 and probes[16].accuracy < 0.5
    assert res.accuracy_moved_at is not None and res.accuracy_moved_at >= K
    assert all(not p.eligible for p in res.probes if p.load >= K)
    assert (tmp_path / "full" / "tune.png").stat().st_size > 0
    md = (tmp_path / "full" / "tune.md").read_text()
    assert "Operating point: c = " in md and "Wilson" in md

    # Interrupted after the second probe, then resumed: the same probes, the same decision, and
    # the probes measured before the interruption kept byte for byte.
    out = tmp_path / "resumed"
    seen: list[str] = []

    def stop_after_two(msg: str) -> None:
        seen.append(msg)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_mode("tune", {"base": EvalConfig(evalset="dev", out=out, endpoint=engine.url, model="fake-model"),
                          "slo": ("e2e_p95<=20s",), "hi": 16, "requests": 20, "warmup": 0, "probes": 6,
                          "min_accuracy": 0.5}, stop_after_two)
    kept = {d.name: _digest(d) for d in (out / "probes").iterdir()}
    assert len(kept) == 2 and not (out / "tune.json").exists()
    again = _tune(engine, out, resume=True)
    assert [(p.order, p.load, p.eligible) for p in again.probes] == [(p.order, p.load, p.eligible) for p in res.probes]
    # The probes after the interruption are measured again, so their goodput (a timing) may differ
    # from the first run's: the decision is the same rule over the resumed run's own measurements.
    best = max((p for p in again.probes if p.eligible), key=lambda p: (p.correct_goodput_per_s or 0, p.load))
    assert again.operating_point is not None and again.operating_point.load == best.load < K
    assert {d: _digest(out / "probes" / d) for d in kept} == kept
    assert any("Resumed" in n for n in again.notes)


def test_tune_cli_refuses_bad_slo_without_a_server(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["tune", "--slo", "e2e<=8", "--endpoint", "http://127.0.0.1:9/v1",
                                   "--out", str(tmp_path / "t")])
    assert res.exit_code == 2 and "--slo" in res.output
    assert not (tmp_path / "t").exists()
