"""``compare``: folders of runs as ``view`` takes them, the paired comparison and flipped items
against the first run, labelled recall, machine lines -- on runs scored offline here."""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path

import pytest
from retail import retail_wh
from typer.testing import CliRunner

from nlq2sql.answers.offline import score_responses
from nlq2sql.cli.main import app
from nlq2sql.stages.evalset import EVALSET_DIR, load_evalset
from nlq2sql.stages.pipeline import ScoreConfig
from nlq2sql.stages.score import mcnemar_exact

runner = CliRunner()

HOSTILE = '<script>alert("x")</script> | <img src=x onerror=alert(1)> & `tick`'


def _evalset(tmp: Path) -> Path:
    """The shipped retail held-out set with one question made hostile (``ho-007``)."""
    lines = []
    for line in (EVALSET_DIR / "heldout.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["id"] == "ho-007":
            row["question"] = HOSTILE
        lines.append(json.dumps(row))
    path = tmp / "hostile.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(tmp: Path, evalset: Path, out: Path, wrong: set[str]) -> Path:
    """A run answering every item with its gold, but a wrong metric on the ``wrong`` items."""
    rows = []
    for c in load_evalset(evalset, retail_wh()).cases:
        gold = c.gold.model_dump(mode="json")
        if c.id in wrong:
            gold.update(metric="units" if gold["metric"] != "units" else "orders")
        rows.append({"id": c.id, "text": json.dumps(gold), "finish_reason": "stop"})
    responses = tmp / f"{out.name}.jsonl"
    responses.write_text("".join(json.dumps(r) + "\n" for r in rows))
    score_responses(ScoreConfig(str(evalset), responses, out))
    return out


def _right(run: Path) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for line in (run / "records.jsonl").read_text().splitlines():
        rec = json.loads(line)
        out.setdefault(rec["id"], bool(rec["correct_final"]))
    return out


def test_compare_pairs_runs_found_in_a_folder_and_escapes_hostile_text(tmp_path: Path) -> None:
    evalset = _evalset(tmp_path)
    folder = tmp_path / "runs"
    base = _run(tmp_path, evalset, folder / "a" / "base", wrong={"ho-010", "ho-020"})
    other = _run(tmp_path, evalset, folder / "b" / "other", wrong={"ho-007", "ho-030"})
    out = tmp_path / "report"
    res = runner.invoke(app, ["compare", str(folder), "--out", str(out)])  # a folder, as `view` takes it
    assert res.exit_code == 0, res.output

    # the hand count, from the two runs' records
    a, b = _right(base), _right(other)
    common = sorted(a.keys() & b.keys())
    down = sorted(i for i in common if a[i] and not b[i])
    up = sorted(i for i in common if b[i] and not a[i])
    assert down == ["ho-007", "ho-030"] and up == ["ho-010", "ho-020"]
    n = len(common)
    diff = (sum(b[i] for i in common) - sum(a[i] for i in common)) / n
    md = (out / "report.md").read_text()
    [row] = [line for line in md.splitlines() if line.startswith("| ") and " pp" in line]
    cells = [c.strip() for c in row.strip("|").split(" | ")]
    assert cells[1:4] == [str(n), str(sum(a.values())), str(sum(b.values()))]
    assert cells[5:7] == [str(len(down)), str(len(up))]
    assert float(cells[7]) == float(f"{mcnemar_exact(len(down), len(up)):.4g}")
    m = re.fullmatch(r"([+−±])(\d+\.\d) pp \[([+−±])(\d+\.\d), ([+−±])(\d+\.\d)\]", cells[4])
    assert m is not None, cells[4]
    assert float(m.group(2)) == round(abs(100 * diff), 1)
    # paired items in the interval: SE clustered by pair_id, never narrower than zero width here
    lo = (-1 if m.group(3) == "−" else 1) * float(m.group(4))
    hi = (-1 if m.group(5) == "−" else 1) * float(m.group(6))
    assert lo < 100 * diff < hi and math.isclose(hi - 100 * diff, 100 * diff - lo, abs_tol=0.11)

    # flipped items: right → wrong first, each with its id
    flip_rows = [line for line in md.splitlines() if re.match(r"\| ho-\d+ \| (right|wrong) → ", line)]
    assert [r.split(" | ")[0][2:] for r in flip_rows] == down + up
    assert all("right → wrong" in r for r in flip_rows[:2]) and all("wrong → right" in r for r in flip_rows[2:])
    assert "<script>" not in md and "\\|" in md  # the hostile question cannot open a tag or end the cell

    page = (out / "report.html").read_text()
    assert "<script" not in page and "<img src=x" not in page
    assert html.escape(HOSTILE) in page
    assert "ho-030" in page and "wrong → right" in page


def test_compare_labels_recall_and_states_where_runs_ran(tmp_path: Path) -> None:
    evalset = _evalset(tmp_path)
    a = _run(tmp_path, evalset, tmp_path / "a", wrong=set())
    b = _run(tmp_path, evalset, tmp_path / "b", wrong={"ho-001"})
    out = tmp_path / "report"
    res = runner.invoke(app, ["compare", str(a), str(b), "--out", str(out)])
    assert res.exit_code == 0, res.output
    md = (out / "report.md").read_text()
    assert "intervention recall by failure kind" in md
    assert "Where each run ran" in md and md.count("harness ") == 2
    assert "CPU timings" not in md  # no manifest here records the server's device


def test_compare_refuses_a_folder_without_runs_as_view_does(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    res = runner.invoke(app, ["compare", str(empty), "--out", str(tmp_path / "r")])
    assert res.exit_code == 2
    assert "no manifest.json here or in its sub-directories" in res.output
    assert not (tmp_path / "r").exists()


def test_no_line_joins_two_runs_at_one_concurrency(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.axes import Axes

    from nlq2sql.experiments import compare as cmp

    evalset = _evalset(tmp_path)
    runs = cmp.load_runs([_run(tmp_path, evalset, tmp_path / n, wrong=set()) for n in ("a", "b")])
    assert runs[0].manifest.concurrency == runs[1].manifest.concurrency
    styles: list[str] = []
    real = Axes.plot

    def plot(self: Axes, *args: object, **kw: object) -> object:
        styles.extend(a for a in args if isinstance(a, str))
        return real(self, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Axes, "plot", plot)
    cmp.plots(runs)
    assert styles == ["o", "s"]  # markers only: no stroke between the two runs
