"""Every load run is a registered mode behind one entry, ``run_mode(name, settings)``.

A new load mode and a new probe are declared here, in the test (settings, levels or requests,
analysis and render in one place; no package file touched), and run through ``run_mode``
against the fake server; the probe is also a ``nlq2sql probe`` command with its options
generated from its settings.  The sweep command's choice among its five modes is decided in the
library (``sweep_mode``), so a library caller gets the command's refusals.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import aiohttp
import pytest
from fakeserver import FakeServer
from typer.testing import CliRunner

from nlq2sql.cli.load import add_probe_commands, probe_app
from nlq2sql.cli.main import app
from nlq2sql.errors import InputError
from nlq2sql.load.driver import MODES, LevelContext, LoadMode, LoadSettings, ModeSettings, option, register
from nlq2sql.load.levels import run_level
from nlq2sql.load.modes import BUILTIN, mode, registry, run_mode, sweep_mode
from nlq2sql.load.probes import ProbeMode, ProbeSettings, Target, stream_chat
from nlq2sql.load.sweep import ServerSweepSettings, SweepConfig
from nlq2sql.records.typed import Typed
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.endpoints import ReplicaSpec

# -- a new load mode: concurrency in steps until a ceiling, and where req/s peaked ----------


class StairSettings(LoadSettings):
    step: int = option(2, "--step", ge=1)
    top: int = option(5, "--top", ge=1, le=64)


class StairResult(Typed):
    kind: str  # given (a result's JSON holds the fields set)
    levels: list[int]
    ok: list[int]
    peak_at: int
    notes: list[str]
    elapsed_s: float | None = None
    record_version: int | None = None


@register
class StairMode(LoadMode[StairSettings, StairResult]):
    """c = 1, 1 + step, … up to ``top``; the level with the most requests per second."""

    name: ClassVar[str] = "test-stairs"
    stem: ClassVar[str] = "stairs"
    settings_model: ClassVar[type[LoadSettings]] = StairSettings

    def next_level(self, settings: StairSettings, done: list[Any]) -> int | None:
        c = 1 + settings.step * len(done)
        return c if c <= settings.top else None

    def run_level(self, ctx: LevelContext[StairSettings], level: Any) -> Any:
        return run_level(ctx.settings.base, ctx.evalset_path, level, ctx.out / f"c{level}", reuse=ctx.settings.resume)

    def describe(self, level: Any, stats: Any) -> str:
        return f"c={level}: {stats.ok}/{stats.n}"

    def analyse(self, ctx: LevelContext[StairSettings], done: list[Any]) -> StairResult:
        peak = max(done, key=lambda s: s.req_per_s or 0.0)
        return StairResult(kind="test-stairs", levels=[s.concurrency for s in done], ok=[s.ok for s in done],
                           peak_at=peak.concurrency, notes=ctx.notes)

    def render(self, result: StairResult) -> str:
        return f"# stairs\n\nlevels {result.levels}; req/s peaked at c={result.peak_at}\n"


# -- a new probe: time to first token of a few sequential streamed requests ---------------


class FirstTokenSettings(ProbeSettings):
    requests: int = option(3, "--requests", "Streamed requests, one after another.", ge=1, le=100)
    question: str = option("revenue by region", "--question", "The question each request asks.")


class FirstTokenResult(Typed):
    kind: str
    endpoint: str
    model: str
    n: int
    ok: int
    ttft_p50_s: float | None
    created: float | None = None
    record_version: int | None = None


@register
class FirstTokenProbe(ProbeMode[FirstTokenSettings, FirstTokenResult]):
    name: ClassVar[str] = "probe-test-first-token"
    stem: ClassVar[str] = "first-token"
    settings_model: ClassVar[type[ModeSettings]] = FirstTokenSettings

    async def probe(self, t: Target, settings: FirstTokenSettings) -> FirstTokenResult:
        body = {"model": t.model, "max_tokens": 16, "messages": [{"role": "user", "content": settings.question}]}
        async with aiohttp.ClientSession() as sess:
            got = [await stream_chat(sess, t, body) for _ in range(settings.requests)]
        ttfts = [s.ttft_s for s in got if s.status == 200 and s.ttft_s is not None]
        return FirstTokenResult(kind="probe-first-token", endpoint=t.base_url, model=t.model, n=len(got), ok=len(ttfts),
                                ttft_p50_s=statistics.median(ttfts) if ttfts else None)

    def render(self, result: FirstTokenResult) -> str:
        return f"# first token · {result.model}\n\n{result.ok}/{result.n} streamed, TTFT p50 {result.ttft_p50_s}\n"


@pytest.fixture(scope="module", autouse=True)
def _unregister() -> Iterator[None]:
    """The modes (and the probe's command) declared here leave with this module: a later test
    (the CLI reference, the registry listing) sees the package's own only."""
    yield
    for name in ("test-stairs", "probe-test-first-token"):
        MODES.pop(name, None)
    probe_app.registered_commands[:] = [c for c in probe_app.registered_commands if c.name != "test-first-token"]


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeServer]:
    with FakeServer(tmp_path_factory.mktemp("fake"), delay_s=0.05) as f:
        yield f


def _base(fake: FakeServer, out: Path) -> EvalConfig:
    return EvalConfig(evalset="dev", out=out, endpoint=fake.url, model="fake-model")


def test_a_mode_declared_here_runs_through_run_mode(fake: FakeServer, tmp_path: Path) -> None:
    said: list[str] = []
    out = tmp_path / "stairs"
    res = run_mode("test-stairs", StairSettings(base=_base(fake, out), requests=4, warmup=0, step=2, top=5),
                   said.append)
    assert isinstance(res, StairResult)
    assert said == ["c=1: 4/4", "c=3: 4/4", "c=5: 4/4"]
    written = json.loads((out / "stairs.json").read_text())
    assert written["kind"] == "test-stairs" and written["levels"] == [1, 3, 5] and written["ok"] == [4, 4, 4]
    assert written["peak_at"] in (1, 3, 5) and written["record_version"] is not None and written["elapsed_s"] > 0
    assert (out / "stairs.md").read_text() == mode("test-stairs").render(res)
    # Values instead of a model are validated into the mode's settings: a bad one names its option.
    with pytest.raises(InputError) as exc:
        run_mode("test-stairs", {"base": _base(fake, tmp_path / "bad"), "top": 0})
    assert exc.value.field == "--top" and not (tmp_path / "bad").exists()


def test_a_probe_declared_here_runs_through_run_mode(fake: FakeServer, tmp_path: Path) -> None:
    sent = len(fake.chat_requests())
    out = tmp_path / "ft"
    res = run_mode("probe-test-first-token", {"base": _base(fake, out), "requests": 3})
    assert isinstance(res, FirstTokenResult) and res.created is not None
    assert len(fake.chat_requests()) == sent + 3
    written = json.loads((out / "first-token.json").read_text())
    assert written["kind"] == "probe-first-token" and written["n"] == written["ok"] == 3
    assert written["endpoint"] == fake.url and written["ttft_p50_s"] > 0
    assert (out / "first-token.md").read_text().startswith("# first token · fake-model\n\n3/3 streamed")


def test_every_builtin_is_registered_with_its_settings_model() -> None:
    modes = registry()
    names = {m.name for m in BUILTIN}
    assert names == {"sweep", "rate-sweep", "server-sweep", "fleet-sweep", "reanalyse", "grid", "serialization",
                     "tune", "probe-cancel", "probe-health", "probe-prefix", "capacity"}
    for m in BUILTIN:
        assert modes[m.name] is m and issubclass(m.settings_model, ModeSettings)
    with pytest.raises(InputError) as exc:
        run_mode("no-such-mode", {})
    assert "probe-cancel" in str(exc.value)
    with pytest.raises(TypeError, match="StairSettings"):
        run_mode("test-stairs", SweepConfig(base=EvalConfig()))


# -- the sweep command's choice ------------------------------------------------------------

def _cfg(tmp_path: Path, **kw: Any) -> SweepConfig:
    base = EvalConfig(evalset="dev", out=tmp_path / "out", endpoint="http://127.0.0.1:9/v1", model="m")
    return SweepConfig(base=base, levels=(1, 4, 2), **kw)


def test_sweep_mode_picks_the_mode_and_its_settings(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    assert sweep_mode(cfg) == ("sweep", cfg)
    name, rate = sweep_mode(cfg, rates=(1.0, 2.0))
    assert name == "rate-sweep" and rate.rates == (1.0, 2.0) and rate.max_in_flight == 4  # type: ignore[attr-defined]
    name, server = sweep_mode(cfg.but(base=replace(cfg.base, endpoint=None)), server_sweep="max-num-seqs=2,8")
    assert name == "server-sweep" and isinstance(server, ServerSweepSettings)
    assert (server.knob, server.values) == ("max_num_seqs", (2, 8))
    for bad in ({"knob": "gpu_memory"}, {"values": ()}):
        with pytest.raises(InputError) as exc:
            ServerSweepSettings(**({"sweep": cfg, "knob": "max_num_seqs", "values": (1,)} | bad))
        assert exc.value.field == "--server-sweep"
    fleet = cfg.but(base=replace(cfg.base, replicas=(ReplicaSpec("http://127.0.0.1:8/v1"),)))
    assert sweep_mode(fleet) == ("fleet-sweep", fleet)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "sweep.json").write_text("{}")
    assert sweep_mode(cfg, reanalyse=True) == ("reanalyse", cfg)


@pytest.mark.parametrize("kw, field", [
    ({"rates": (1.0,), "server_sweep": "max-num-seqs=1"}, "--server-sweep"),
    ({"rates": (), "reanalyse": True}, "--reanalyse"),
    ({"server_sweep": "max-num-seqs=1", "reanalyse": True}, "--reanalyse"),
    ({"reanalyse": True}, "--out"),
])
def test_impossible_combinations_name_the_option(tmp_path: Path, kw: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as exc:
        sweep_mode(_cfg(tmp_path), **kw)
    assert exc.value.field == field
    assert not (tmp_path / "out").exists()  # refused before anything was touched


def test_a_fleet_is_a_closed_loop_sweep_only(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    fleet = cfg.but(base=replace(cfg.base, replicas=(ReplicaSpec("http://127.0.0.1:8/v1"),)))
    for kw in ({"rates": (1.0,)}, {"server_sweep": "max-num-seqs=1"}, {"reanalyse": True}):
        with pytest.raises(InputError) as exc:
            sweep_mode(fleet, **kw)  # type: ignore[arg-type]
        assert exc.value.field == "--endpoint"


@pytest.mark.parametrize("kw, sweep_kw, field", [
    ({"server_sweep": "max-num-seqs=1"}, {}, "--server-sweep"),
    ({"reanalyse": True}, {}, "--reanalyse"),
    ({}, {"force": True}, "--force"),
])
def test_resume_is_for_closed_loop_and_rate_sweeps(tmp_path: Path, kw: dict[str, Any], sweep_kw: dict[str, Any],
                                                   field: str) -> None:
    with pytest.raises(InputError) as exc:
        name, settings = sweep_mode(_cfg(tmp_path, resume=True, **sweep_kw), **kw)
        run_mode(name, settings)
    assert exc.value.field == field
    assert not (tmp_path / "out").exists()


def test_a_probe_declared_here_is_a_command_with_its_options(fake: FakeServer, tmp_path: Path) -> None:
    assert "test-first-token" in add_probe_commands() + [c.name for c in probe_app.registered_commands]
    runner = CliRunner()
    shown = runner.invoke(app, ["probe", "test-first-token", "--help"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    for text in ("--requests", "Streamed requests, one after another.", "--question", "--endpoint", "--out"):
        assert text in shown.output
    sent = len(fake.chat_requests())
    out = tmp_path / "cli-ft"
    res = runner.invoke(app, ["probe", "test-first-token", "--endpoint", fake.url, "--model", "fake-model",
                              "--requests", "2", "--question", "orders by month", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert len(fake.chat_requests()) == sent + 2
    assert json.loads((out / "first-token.json").read_text())["n"] == 2
    bad = runner.invoke(app, ["probe", "test-first-token", "--endpoint", fake.url, "--requests", "0",
                              "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and "--requests" in bad.output and "at least 1" in bad.output
    assert not (tmp_path / "bad").exists()
