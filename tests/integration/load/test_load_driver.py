"""A new load mode is one class: declared here, in the test (no package file touched), registered,
and run by the driver against the fake server — endpoint, warm-up, levels, resume, output."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from fakeserver import FakeServer

from nlq2sql.errors import InputError
from nlq2sql.load.contract import LevelStats
from nlq2sql.load.driver import LevelContext, LoadMode, LoadSettings, option, register
from nlq2sql.load.levels import run_level
from nlq2sql.load.modes import registry, run_mode
from nlq2sql.records.typed import Typed
from nlq2sql.run.config import EvalConfig


class PairSettings(LoadSettings):
    low: int = option(1, "--low", ge=1)
    high: int = option(3, "--high", ge=1)


class PairResult(Typed):
    """The mode's result, typed like every mode's (``elapsed_s``: the driver's timing, added last)."""

    levels: list[int]
    ok: list[int]
    ratio: float
    notes: list[str]
    elapsed_s: float | None = None


@register
class PairMode(LoadMode[PairSettings, PairResult]):
    """The smallest useful mode: two concurrency levels and the throughput ratio between them."""

    name: ClassVar[str] = "test-pair"
    stem: ClassVar[str] = "pair"
    settings_model: ClassVar[type[LoadSettings]] = PairSettings

    def check(self, settings: PairSettings) -> None:
        if settings.high <= settings.low:
            raise InputError("must be above --low", field="--high")

    def next_level(self, settings: PairSettings, done: list[Any]) -> int | None:
        levels = (settings.low, settings.high)
        return levels[len(done)] if len(done) < len(levels) else None

    def run_level(self, ctx: LevelContext[PairSettings], level: Any) -> LevelStats:
        return run_level(ctx.settings.base, ctx.evalset_path, level, ctx.out / f"c{level}",
                         reuse=ctx.settings.resume)

    def describe(self, level: Any, stats: Any) -> str:
        return f"c={level}: {stats.ok}/{stats.n}"

    def analyse(self, ctx: LevelContext[PairSettings], done: list[Any]) -> PairResult:
        lo, hi = done
        return PairResult(levels=[lo.concurrency, hi.concurrency], ok=[lo.ok, hi.ok],
                          ratio=hi.req_per_s / lo.req_per_s, notes=ctx.notes)

    def render(self, result: PairResult) -> str:
        return f"# pair\n\nc={result.levels[1]} / c={result.levels[0]}: {result.ratio:.2f}x\n"


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeServer]:
    with FakeServer(tmp_path_factory.mktemp("fake"), delay_s=0.2) as f:
        yield f


def _values(fake: FakeServer, out: Path, **kw: Any) -> dict[str, Any]:
    return {"base": EvalConfig(evalset="dev", out=out, endpoint=fake.url, model="fake-model"),
            "requests": 6, "warmup": 1} | kw


def test_a_mode_declared_in_a_test_runs_through_the_driver(fake: FakeServer, tmp_path: Path) -> None:
    modes = registry()
    assert modes["test-pair"] is PairMode and "tune" in modes
    said: list[str] = []
    res = run_mode("test-pair", _values(fake, tmp_path / "pair"), said.append)
    assert isinstance(res, PairResult) and res.ok == [6, 6] and res.ratio > 1.5  # the fake serves concurrently
    assert said == ["c=1: 6/6", "c=3: 6/6"]
    out = tmp_path / "pair"
    assert json.loads((out / "pair.json").read_text())["levels"] == [1, 3]
    assert (out / "pair.md").read_text().startswith("# pair")
    assert json.loads((out / "job.json").read_text())["who"] == "test-pair"
    assert any("warm-up" in n for n in res.notes)  # the driver ran the warm-up, not the mode
    # --resume keeps both finished levels (only the warm-up is sent again); other settings are refused.
    sent = len(fake.chat_requests())
    again = run_mode("test-pair", _values(fake, out, resume=True))
    assert isinstance(again, PairResult) and len(fake.chat_requests()) == sent + 1
    assert any("Resumed: 2 level" in n for n in again.notes)
    with pytest.raises(InputError) as exc:
        run_mode("test-pair", _values(fake, out, resume=True, high=4))
    assert exc.value.field == "--resume"


@pytest.mark.parametrize("kw, field", [({"high": 1}, "--high"), ({"low": 0}, "--low"),
                                       ({"requests": 0}, "--requests"), ({"resume": True, "force": True}, "--force")])
def test_refusals_name_the_option_and_touch_nothing(fake: FakeServer, tmp_path: Path, kw: dict[str, Any],
                                                    field: str) -> None:
    with pytest.raises(InputError) as exc:
        run_mode("test-pair", _values(fake, tmp_path / "o", **kw))
    assert exc.value.field == field
    assert not (tmp_path / "o").exists()


def test_unknown_mode_and_a_second_registration_are_refused() -> None:
    with pytest.raises(InputError):
        run_mode("no-such-mode")
    with pytest.raises(ValueError, match="registered twice"):
        register(type("Other", (PairMode,), {}))
