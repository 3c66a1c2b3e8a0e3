"""One run specification (``run.spec.RunSpec``), every command the same way: presets, explicit
options over them, ``--like RUN_DIR`` repeating a recorded run, and refusals by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from nlq2sql.cli import app
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.presets import Preset, presets, register
from nlq2sql.run.spec import RunSpec

runner = CliRunner()

#: A preset declared here, in this module only (no other file names it).
TEST_PRESET = Preset("test-two-examples", "Two retrieved examples, hint-only value linking, warm sampling.",
                     {"answer": "query", "examples": 2, "link_values": "hint", "temperature": 0.5,
                      "max_tokens": 77, "guardrails": ("sort",)})
register(TEST_PRESET)

#: The v2 answer the fake server gives every question (a valid MetricFlow query on retail).
QUERY = {"metrics": ["revenue"], "group_by": ["customer_id__region"]}
SPEC_KEYS = ("model", "answer", "prompt", "prompt_style", "guardrails", "examples", "link_values", "link_schema",
             "planner", "samples", "abstain", "abstain_below", "semantic_model", "db", "spec")


def _last_config(monkeypatch: pytest.MonkeyPatch) -> list[EvalConfig]:
    """Stop ``eval`` at the run itself and keep the config it built."""
    seen: list[EvalConfig] = []

    def fake_run(cfg: EvalConfig, progress: Any = None) -> None:
        seen.append(cfg)
        raise SystemExit(0)

    monkeypatch.setattr("nlq2sql.run.live.run_eval", fake_run)
    return seen


def test_a_preset_declared_in_a_test_module_is_found_and_options_win_over_it(monkeypatch: pytest.MonkeyPatch
                                                                              ) -> None:
    assert "test-two-examples" in presets().names() and "main-job" in presets().names()
    seen = _last_config(monkeypatch)
    res = runner.invoke(app, ["eval", "--preset", "test-two-examples", "--endpoint", "http://127.0.0.1:9/v1"])
    assert res.exit_code == 0, res.output
    cfg = seen[-1]
    assert (cfg.answer, cfg.prompt, cfg.guardrails) == ("query", "query", ("sort",))
    assert (cfg.sampling.temperature, cfg.sampling.max_tokens) == (0.5, 77)
    assert dict(cfg.conditions.get("examples") or {})["examples"] == 2
    # explicit options win; a condition's other settings stay the preset's
    res = runner.invoke(app, ["eval", "--preset", "test-two-examples", "--examples", "5", "--max-tokens", "128",
                              "--guardrails", "none", "--endpoint", "http://127.0.0.1:9/v1"])
    assert res.exit_code == 0, res.output
    cfg = seen[-1]
    assert dict(cfg.conditions.get("examples") or {})["examples"] == 5
    assert dict(cfg.conditions.get("values") or {})["link_values"] == "hint"
    assert (cfg.sampling.max_tokens, cfg.sampling.temperature, cfg.guardrails) == (128, 0.5, ())
    # an explicit value equal to the default still wins over the preset (click's parameter source)
    res = runner.invoke(app, ["eval", "--preset", "test-two-examples", "--temperature", "0",
                              "--endpoint", "http://127.0.0.1:9/v1"])
    assert res.exit_code == 0 and seen[-1].sampling.temperature == 0.0, res.output


def test_the_main_job_preset_is_the_recorded_main_job() -> None:
    recorded = RunSpec.from_run(Path("reports/main-job-v2/heldout"))
    assert RunSpec.build(presets()["main-job"].values).resolved() == recorded.resolved()
    cfg = recorded.apply(EvalConfig())
    assert (cfg.model, cfg.answer, cfg.prompt, cfg.guardrails) == ("qwen2.5-coder-0.5b", "query", "query",
                                                                   ("learned:ranking", "sort"))


def test_an_unknown_preset_is_refused_with_the_known_names() -> None:
    res = runner.invoke(app, ["eval", "--preset", "no-such-preset"])
    assert res.exit_code == 2 and "no-such-preset" in res.output and "main-job" in res.output, res.output
    res = runner.invoke(app, ["load-check", "--preset", "nope", "--concurrency", "1,2"])
    assert res.exit_code == 2 and "main-job" in res.output and "test-two-examples" in res.output, res.output


def test_like_refuses_a_directory_without_a_manifest_and_one_that_cannot_give_a_spec(tmp_path: Path) -> None:
    res = runner.invoke(app, ["eval", "--like", str(tmp_path)])
    assert res.exit_code == 2 and "manifest.json" in res.output and str(tmp_path) in res.output, res.output
    (tmp_path / "manifest.json").write_text(json.dumps({"evalset": "heldout", "guardrails": [],
                                                        "sampling": {"max_tokens": 9, "temperature": 0}}))
    res = runner.invoke(app, ["eval", "--like", str(tmp_path)])
    assert res.exit_code == 2 and "manifest.json" in res.output and "model" in res.output, res.output
    (tmp_path / "manifest.json").write_text(json.dumps({"spec": {"model": "m", "answer": "query"}}))
    res = runner.invoke(app, ["eval", "--like", str(tmp_path)])
    assert res.exit_code == 2 and "spec.prompt" in res.output, res.output


def test_like_repeats_a_recorded_run(tmp_path: Path) -> None:
    """A run recorded from a preset with overrides; ``eval --like`` on it records the same spec (the
    manifests compared as parsed JSON on the spec's keys), and an option given over it wins."""
    from fakeserver import FakeServer, script

    qs = tmp_path / "v2.jsonl"
    qs.write_text(json.dumps({"id": "a", "question": "Revenue by region", "gold": QUERY, "category": "breakdown"})
                  + "\n")
    with FakeServer(tmp_path / "fake", script(default={"kind": "text", "text": json.dumps(QUERY)}),
                    model="fake-model") as fake:
        first = runner.invoke(app, ["eval", "--preset", "test-two-examples", "--model", "fake-model", "--evalset",
                                    str(qs), "--endpoint", fake.url, "--out", str(tmp_path / "one")])
        assert first.exit_code == 0, first.output
        again = runner.invoke(app, ["eval", "--like", str(tmp_path / "one"), "--evalset", str(qs),
                                    "--endpoint", fake.url, "--out", str(tmp_path / "two")])
        assert again.exit_code == 0, again.output
        over = runner.invoke(app, ["eval", "--like", str(tmp_path / "one"), "--evalset", str(qs), "--examples", "1",
                                   "--endpoint", fake.url, "--out", str(tmp_path / "three")])
        assert over.exit_code == 0, over.output
    one, two, three = (json.loads((tmp_path / d / "manifest.json").read_text()) for d in ("one", "two", "three"))
    assert {k: one.get(k) for k in SPEC_KEYS} == {k: two.get(k) for k in SPEC_KEYS}
    assert one["spec"]["conditions"] == {"examples": 2, "link_values": "hint"} and one["model"] == "fake-model"
    assert one["sampling"]["temperature"] == 0.5 and one["sampling"]["max_tokens"] == 77
    assert one["guardrails"] == ["sort"]  # (hint-only linking adds no rule set)
    assert three["examples"]["k"] == 1 and three["link_values"] == "hint" and three["spec"]["temperature"] == 0.5


def test_a_run_recorded_before_the_spec_section_still_gives_its_spec(tmp_path: Path) -> None:
    manifest = json.loads(Path("reports/main-job-v2/heldout/manifest.json").read_text())
    assert "spec" not in manifest
    spec = RunSpec.from_run(Path("reports/main-job-v2/heldout"))
    assert spec.values()["examples"] == 8 and spec.values()["link_values"] == "both"
    assert spec.resolved().guardrails == ("learned:ranking", "sort")  # "values" is the linking's own
    # and a recorded spec section round-trips
    assert RunSpec.from_part(spec.recorded()).resolved() == spec.resolved()


#: Where each command hands its built config on (patched to stop there): load-check binds its endpoint,
#: tune and sweep call the load driver, the matrix shares one endpoint over its runs.
STOPS = {
    "load-check": ("nlq2sql.run.live.bound_endpoint", lambda cfg, *a, **k: cfg),
    "tune": ("nlq2sql.load.modes.run_mode", lambda name, settings, *a: settings["base"]),
    "sweep": ("nlq2sql.load.modes.run_mode", lambda name, settings, *a: settings.base),
    "matrix": ("nlq2sql.experiments.common.shared_endpoint", lambda cfg, *a, **k: cfg),
}


@pytest.mark.parametrize("command", [
    ["load-check", "--concurrency", "1,2"],
    ["tune", "--slo", "e2e_p95<=8s"],
    ["sweep", "--concurrency", "1,2"],
    ["matrix"],
])
def test_every_load_command_takes_the_main_job_spec(command: list[str], monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    """load-check, tune, sweep and matrix build their runs' config from the same spec options."""
    seen: list[EvalConfig] = []
    target, pick = STOPS[command[0]]

    def stop(*args: Any, **kwargs: Any) -> Any:
        seen.append(pick(*args, **kwargs))
        raise SystemExit(0)

    monkeypatch.setattr(target, stop)
    res = runner.invoke(app, [*command, "--answer", "query", "--examples", "8", "--link-values", "both",
                              "--guardrails", "learned:ranking,sort", "--model", "qwen2.5-coder-0.5b",
                              "--temperature", "0.25", "--endpoint", "http://127.0.0.1:9/v1",
                              "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    cfg = seen[-1]
    assert (cfg.answer, cfg.model, cfg.sampling.temperature) == ("query", "qwen2.5-coder-0.5b", 0.25)
    assert dict(cfg.conditions.get("examples") or {})["examples"] == 8
    assert dict(cfg.conditions.get("values") or {})["link_values"] == "both"
    if command[0] != "matrix":  # (the matrix re-scores its own guardrail axis)
        assert cfg.guardrails == ("learned:ranking", "sort") and cfg.prompt == "query"
    res = runner.invoke(app, [*command, "--preset", "main-job", "--endpoint", "http://127.0.0.1:9/v1",
                              "--out", str(tmp_path / "out2")])
    assert res.exit_code == 0, res.output
    assert RunSpec.of(seen[-1]).values()["examples"] == 8 and seen[-1].model == "qwen2.5-coder-0.5b"


def test_a_part_a_command_cannot_apply_is_refused_by_name(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    res = runner.invoke(app, ["batch", "--evalset", "heldout", "--engine", "ray-vllm", "--examples", "2",
                              "--out", str(tmp_path / "b")])
    assert res.exit_code == 2 and "--examples" in res.output, res.output
    res = runner.invoke(app, ["batch", "--evalset", "heldout", "--engine", "ray-vllm", "--answer", "query",
                              "--out", str(tmp_path / "b")])
    assert res.exit_code == 2 and "--answer query" in res.output and not (tmp_path / "b").exists(), res.output


def test_preset_and_like_together_are_refused(tmp_path: Path) -> None:
    res = runner.invoke(app, ["eval", "--preset", "main-job", "--like", str(tmp_path)])
    assert res.exit_code == 2 and "--preset" in res.output and "--like" in res.output, res.output


def test_vllm_bench_serve_aliases(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _last_config(monkeypatch)
    res = runner.invoke(app, ["eval", "--base-url", "http://127.0.0.1:9/v1", "--max-concurrency", "3"])
    assert res.exit_code == 0, res.output
    assert seen[-1].endpoint == "http://127.0.0.1:9/v1" and seen[-1].concurrency == 3


@settings(max_examples=60, deadline=None)
@given(answer=st.sampled_from(["intent", "query", "sql"]), examples=st.integers(0, 20),
       link=st.sampled_from(["none", "hint", "repair", "both"]), temperature=st.floats(0, 2),
       max_tokens=st.integers(1, 4096), prompt=st.none() | st.sampled_from(["baseline", "contrastive", "query"]),
       guardrails=st.none() | st.lists(st.sampled_from(["ranking", "sort", "learned:ranking"]), unique=True,
                                       max_size=3).map(tuple))
def test_a_spec_survives_its_flat_form_and_its_manifest_record(answer: str, examples: int, link: str,
                                                               temperature: float, max_tokens: int,
                                                               prompt: str | None,
                                                               guardrails: tuple[str, ...] | None) -> None:
    from nlq2sql.records.manifest_parts import SpecPart

    spec = RunSpec.build({"answer": answer, "examples": examples, "link_values": link, "temperature": temperature,
                          "max_tokens": max_tokens, "prompt": prompt, "guardrails": guardrails})
    assert RunSpec.build(spec.values()) == spec
    written = json.loads(json.dumps(spec.recorded().to_json()))  # as manifest.json holds it
    again = RunSpec.from_part(SpecPart.model_validate(written))
    assert again.resolved() == spec.resolved()
    assert again.apply(EvalConfig()) == spec.apply(EvalConfig())


def test_the_recorded_spec_names_no_machine_path(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    part = RunSpec.build({"db": str(db), "semantic_model": str(tmp_path / "layer"), "model": str(tmp_path / "m"),
                          "profiles_dir": str(tmp_path)}).recorded()
    assert str(tmp_path) not in json.dumps(part.to_json())
    assert part.db == "w.duckdb" and part.semantic_model == "layer"
    assert RunSpec.build({"db": "rel/w.duckdb"}).recorded().db == "rel/w.duckdb"  # relative: as given
