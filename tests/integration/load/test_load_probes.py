"""The serving-path probes' typed results (nlq2sql.load.probes, .probe_results), offline.

Against the fault server, which has no ``/metrics``: every server-side figure must say "not
observed" (with its count), never zero, and each result must be its declared contract --
validated before it is written and read back typed.  The probes' measurements themselves are
tested against a real vLLM (``tests/live/test_load_live.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nlq2sql.load import probes
from nlq2sql.load.modes import mode, run_mode
from nlq2sql.load.output import write_outputs
from nlq2sql.load.probe_results import CancelProbeResult, HealthProbeResult, PrefixProbeResult
from nlq2sql.load.results import checked, load_result
from nlq2sql.run.config import EvalConfig


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from fakeserver import FakeServer, script

    with FakeServer(tmp_path_factory.mktemp("fake"), script(), model="fake-model") as srv:
        yield srv


def test_each_probe_writes_its_typed_result_and_says_not_observed(fake, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cases = {"cancel": ({"k_tokens": 2, "max_tokens": 64, "trials": 2, "settle_s": 0.0}, CancelProbeResult),
             "health": ({"prefill_words": 50, "parallel": 2, "idle_count": 5}, HealthProbeResult),
             "prefix": ({"system": "answer", "questions": ["revenue by region"], "requests": 2, "pad_words": 20,
                         "max_tokens": 8}, PrefixProbeResult)}
    for name, (kw, model) in cases.items():
        run_mode(f"probe-{name}", {"base": EvalConfig(endpoint=fake.url, model="fake-model", out=tmp_path / name),
                                   **kw})
        md = (tmp_path / name / f"{name}.md").read_text()
        typed = load_result(tmp_path / name / f"{name}.json", expect=model)
        assert typed.kind == f"probe-{name}" and typed.record_version is not None and typed.model == "fake-model"
        assert "not observed" in md, name
        if name == "cancel":
            assert [x.note for x in typed.trials] == ["/metrics not observed"] * 2
            assert typed.to_idle_s.n == 0 and typed.to_idle_s.p50 is None
        elif name == "health":
            assert typed.idle.n == 5 and typed.idle.ok == 5 and typed.prefill_requests.ok == 2
            assert typed.server_prefill_s.n == 0 and typed.server_prefill_s.note == "not observed"
        else:
            assert set(typed.scenarios) == set(probes.SCENARIOS)
            shared = typed.scenarios["shared"]
            assert shared.ok == 2 and shared.client_ttft_s.n == 2
            assert shared.prefix_cache.rate is None and shared.prefix_cache.note == "not observed"
        # The Markdown on disk is the one rendered from the typed result.
        assert md == mode(f"probe-{name}").render(typed)
        assert md.startswith(f"# {name} probe · fake-model\n\n")


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")
def test_an_undeclared_key_fails_before_anything_is_written(tmp_path: Path) -> None:
    r = {"kind": "probe-health", "probe": "health", "endpoint": "http://x/v1", "model": "m", "interval_s": 0.05,
         "idle": {"n": 0, "ok": 0, "errors": 0, "error_kinds": [], "p50_s": None, "p95_s": None, "max_s": None},
         "under_prefill": {"n": 0, "ok": 0, "errors": 0, "error_kinds": [], "p50_s": None, "p95_s": None,
                           "max_s": None},
         "prefill_requests": {"n": 0, "ok": 0, "parallel": 1, "errors": [], "prompt_tokens": {"n": 0},
                              "ttft_s": {"n": 0}, "load_wall_s": 0.0},
         "server_prefill_s": {"n": 0, "mean": None}, "server_ttft_s": {"n": 0, "mean": None}}
    written = write_outputs(tmp_path / "ok", "health", HealthProbeResult.from_json(r), probes.HealthMode().render)
    assert json.loads((tmp_path / "ok" / "health.json").read_text())["record_version"] == written.record_version
    assert written.record_version is not None
    with pytest.raises(AssertionError, match="HealthProbeResult"):
        checked({**r, "surprise": 1})
    bad = HealthProbeResult.from_json(r)
    bad.prefill_requests.errors.append(42)  # type: ignore[arg-type]  # a list mutated in place is not re-validated
    with pytest.raises(AssertionError, match="HealthProbeResult"):
        write_outputs(tmp_path / "bad", "health", bad, probes.HealthMode().render)
    assert not (tmp_path / "bad" / "health.json").exists()
