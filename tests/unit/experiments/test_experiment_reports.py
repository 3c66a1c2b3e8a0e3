"""The experiments' committed reports, re-derived from their committed inputs.

Each experiment builds its result as a type and serialises it only when written, so the same
recorded runs must still give the same ``*.json`` as parsed (key order and layout are not compared;
every value and its JSON type is) and the same ``*.md`` text (the rendered report is what a reader
reads, so its text is the product).  Where the inputs are not all recorded (compact's re-tokenised
counts came from a live server), the committed JSON is read into the type and written back, and
the Markdown re-rendered from it.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from snapshot import assert_same_json

from nlq2sql.experiments import arms as ar
from nlq2sql.experiments import backends as bk
from nlq2sql.experiments import compact as cx
from nlq2sql.experiments import compare
from nlq2sql.experiments import matrix as mx
from nlq2sql.paths import PROJECT_ROOT

REPORTS = PROJECT_ROOT / "reports"


def _same(written: Path, committed: Path) -> None:
    """JSON as parsed; a rendered report as its text."""
    if not committed.is_file():
        return
    if committed.suffix == ".json":
        assert_same_json(json.loads(written.read_text()), json.loads(committed.read_text()), committed)
    else:
        assert written.read_text() == committed.read_text(), committed


def _dirs(pattern: str) -> list[Path]:
    return sorted(p.parent for p in REPORTS.glob(pattern))


@pytest.mark.parametrize("d", _dirs("*/compact/compact.json"), ids=lambda d: d.parent.name)
def test_compact_report_round_trips_through_its_type(d: Path, tmp_path: Path) -> None:
    res = cx.CompactResult.from_json(json.loads((d / "compact.json").read_text()))
    cx.write_result(tmp_path, res)
    _same(tmp_path / "compact.json", d / "compact.json")
    _same(tmp_path / "compact.md", d / "compact.md")


@pytest.mark.parametrize("d", _dirs("backends/*/backends.json"), ids=lambda d: d.name)
def test_backends_report_re_derived_from_its_runs(d: Path, tmp_path: Path) -> None:
    committed = json.loads((d / "backends.json").read_text())
    names = tuple(r["backend"] for r in committed["backends"])
    errors = {r["backend"]: r["error"] for r in committed["backends"] if "error" in r}
    bk.write_result(tmp_path, bk.summarise_backends(d, names, errors))
    _same(tmp_path / "backends.json", d / "backends.json")
    _same(tmp_path / "backends.md", d / "backends.md")


@pytest.mark.parametrize("d", _dirs("arms/*/*/arms.json"), ids=lambda d: f"{d.parent.name}/{d.name}")
def test_arms_report_re_derived_from_its_runs(d: Path, tmp_path: Path) -> None:
    committed = json.loads((d / "arms.json").read_text())
    title = (d / "arms.md").read_text().splitlines()[0].removeprefix("## ")
    arms = [ar.load_arm(p.parent) for p in sorted(d.glob("*/manifest.json"))]
    ar.write_result(tmp_path, ar.arms_table(arms, committed["gpu_cost_per_hour"]), title)
    _same(tmp_path / "arms.json", d / "arms.json")
    _same(tmp_path / "arms.md", d / "arms.md")


@pytest.mark.parametrize("d", _dirs("*/matrix-*/matrix.json"), ids=lambda d: f"{d.parent.name}/{d.name}")
def test_matrix_report_re_derived_from_its_runs(d: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(PROJECT_ROOT)  # the table names each run as given (relative to the project)
    committed = json.loads((d / "matrix.json").read_text())
    runs: dict[str, Path] = {}
    guardrails: list[str] = []
    for row in committed["conditions"]:
        runs.setdefault(row["prompt"], Path(row["run"]))
        if (g := "+".join(row["guardrails"]) or "none") not in guardrails:
            guardrails.append(g)
    title = (d / "matrix.md").read_text().splitlines()[0].removeprefix("## ")
    mx.write_result(tmp_path, mx.condition_table(runs, tuple(guardrails)), title)
    _same(tmp_path / "matrix.json", d / "matrix.json")
    _same(tmp_path / "matrix.md", d / "matrix.md")


def test_comparison_report_re_derived_from_its_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``reports/report.md``: ``compare`` over the runs ``scripts/run_reports.sh`` names, in its order."""
    monkeypatch.chdir(PROJECT_ROOT)
    dirs: list[Path] = []
    for model in ("smollm2-135m", "qwen2.5-coder-0.5b"):
        dirs += [p.parent for p in sorted(Path("reports", model).glob("matrix-*/*/manifest.json"))]
        dirs += [p.parent for p in sorted(Path("reports", model).glob("load-check/c*-r0/manifest.json"))]
    paths = compare.render(dirs, tmp_path / "cmp", 1.0, "nlq2sql: SmolLM2-135M vs Qwen2.5-Coder-0.5B on CPU vLLM")
    _same(paths["markdown"], REPORTS / "report.md")


def test_every_committed_report_is_covered() -> None:
    assert len(_dirs("*/matrix-*/matrix.json")) >= 4
    assert len(_dirs("*/compact/compact.json")) >= 2
    assert len(_dirs("backends/*/backends.json")) >= 2
    assert len(_dirs("arms/*/*/arms.json")) >= 24


def _script(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, PROJECT_ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_arms_readme_re_derived_from_its_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """``reports/arms/README.md`` (``scripts/arms_report.py``): every arm table and what it reads."""
    monkeypatch.chdir(PROJECT_ROOT)  # the report names its folder as given on the command line
    assert _script("arms_report").main(Path("reports/arms")) == (REPORTS / "arms" / "README.md").read_text()


def test_abstention_readme_re_derived_from_its_runs(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """``reports/abstention/README.md`` (``scripts/abstention_report.py``, printed)."""
    monkeypatch.chdir(PROJECT_ROOT)
    _script("abstention_report").main(Path("reports/abstention"))
    assert capsys.readouterr().out == (REPORTS / "abstention" / "README.md").read_text()
