"""The per-case snapshot helper (``tests/snapshot.py``): a changed value fails, the same value with
its keys in another order passes, a JSON type change (``1`` to ``1.0``) fails, text is compared as
text, and ``--snapshot-update`` writes what differs and removes what no case checks."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from snapshot import Snapshots, assert_snapshot, same_json

SUMMARY: dict[str, Any] = {
    "n": 60, "raw_accuracy": {"value": 0.5, "k": 30, "n": 60, "ci95": [0.37, 0.63]}, "scored": True,
    "by_category": {"top_n": {"k": 3, "n": 4}, "trend": {"k": 0, "n": 2}}, "note": None}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=20)


def _shuffled(x: Any, rng: random.Random) -> Any:
    """The same JSON value with every object's keys in another order."""
    if isinstance(x, dict):
        items = list(x.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(x, list):
        return [_shuffled(v, rng) for v in x]
    return x


def _written(tmp_path: Path, case: str, value: Any) -> Snapshots:
    snaps = Snapshots(tmp_path / "test_mod", update=True)
    snaps.check(case, value)
    assert snaps.written == [snaps.path_for(case, value)]
    return Snapshots(tmp_path / "test_mod")


def test_the_same_value_with_reordered_keys_passes(tmp_path: Path) -> None:
    snaps = _written(tmp_path, "runs/a:scored", SUMMARY)
    path = tmp_path / "test_mod" / "runs" / "a" / "scored.json"
    assert path.is_file() and json.loads(path.read_text()) == SUMMARY
    reordered = _shuffled(SUMMARY, random.Random(1))
    assert list(reordered) != list(SUMMARY) or list(reordered["raw_accuracy"]) != list(SUMMARY["raw_accuracy"])
    snaps.check("runs/a:scored", reordered)  # no error: key order is not compared
    snaps.assert_complete()


@pytest.mark.parametrize(("change", "where"), [
    (lambda s: s["raw_accuracy"].update(k=31), "$.raw_accuracy.k"),
    (lambda s: s["raw_accuracy"].update(value=0.5000000000000001), "$.raw_accuracy.value"),  # floats exact
    (lambda s: s["raw_accuracy"].update(n=60.0), "$.raw_accuracy.n"),  # an int that became a float
    (lambda s: s.update(scored=1), "$.scored"),  # a bool that became an int
    (lambda s: s["by_category"].pop("trend"), "$.by_category.trend: missing"),
    (lambda s: s.update(extra=[]), "$.extra: not in the snapshot"),
    (lambda s: s["raw_accuracy"]["ci95"].reverse(), "$.raw_accuracy.ci95[0]"),  # list order counts
])
def test_a_changed_value_fails_naming_where(tmp_path: Path, change: Any, where: str) -> None:
    snaps = _written(tmp_path, "runs/a:scored", SUMMARY)
    changed = json.loads(json.dumps(SUMMARY))
    change(changed)
    with pytest.raises(AssertionError, match="not its snapshot") as err:
        snaps.check("runs/a:scored", changed)
    assert where in str(err.value) and "--snapshot-update" in str(err.value)


def test_text_is_compared_as_text_and_keeps_its_suffix(tmp_path: Path) -> None:
    snaps = _written(tmp_path, "sweep:sweep.md", "| c | p95 |\n|---|---|\n| 1 | 2.0 |\n")
    assert (tmp_path / "test_mod" / "sweep" / "sweep.md").is_file()
    snaps.check("sweep:sweep.md", "| c | p95 |\n|---|---|\n| 1 | 2.0 |\n")
    with pytest.raises(AssertionError, match="the text differs at line 3"):
        snaps.check("sweep:sweep.md", "| c | p95 |\n|---|---|\n| 1 | 2.00 |\n")
    assert Snapshots(tmp_path).path_for("x:health", "text").name == "health.txt"


def test_a_missing_snapshot_fails_and_update_writes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(AssertionError, match="no snapshot"):
        Snapshots(tmp_path / "m").check("a", {"x": 1})
    monkeypatch.setenv("NLQ2SQL_SNAPSHOT_UPDATE", "1")
    assert_snapshot(tmp_path / "m", "a", {"x": 1})
    monkeypatch.delenv("NLQ2SQL_SNAPSHOT_UPDATE")
    assert_snapshot(tmp_path / "m", "a", {"x": 1})
    with pytest.raises(AssertionError):
        assert_snapshot(tmp_path / "m", "a", {"x": 2})


def test_update_rewrites_only_what_differs(tmp_path: Path) -> None:
    _written(tmp_path, "a", SUMMARY)
    path = tmp_path / "test_mod" / "a.json"
    before = path.read_text()
    updating = Snapshots(tmp_path / "test_mod", update=True)
    updating.check("a", _shuffled(SUMMARY, random.Random(2)))
    assert updating.written == [] and path.read_text() == before
    updating.check("a", {**SUMMARY, "n": 61})
    assert updating.written == [path] and json.loads(path.read_text())["n"] == 61


def test_a_snapshot_no_case_checks_fails_and_update_removes_it(tmp_path: Path) -> None:
    _written(tmp_path, "runs/a:scored", SUMMARY)
    _written(tmp_path, "runs/b:scored", SUMMARY)
    snaps = Snapshots(tmp_path / "test_mod")
    snaps.check("runs/a:scored", SUMMARY)
    with pytest.raises(AssertionError, match="1 snapshot"):
        snaps.assert_complete()
    updating = Snapshots(tmp_path / "test_mod", update=True)
    updating.check("runs/a:scored", SUMMARY)
    updating.assert_complete()
    assert not (tmp_path / "test_mod" / "runs" / "b").exists()
    assert (tmp_path / "test_mod" / "runs" / "a" / "scored.json").is_file()


def test_names_that_would_escape_or_collide_are_refused(tmp_path: Path) -> None:
    snaps = Snapshots(tmp_path)
    for bad in ("", "a/../b", "a::b", "/abs"):
        with pytest.raises(ValueError, match="not a usable name"):
            snaps.path_for(bad, {})
    assert snaps.path_for("a b:c?", {}) == tmp_path / "a_b" / "c_.json"
    updating = Snapshots(tmp_path, update=True)
    updating.check("a b", {})
    with pytest.raises(AssertionError, match="share the file"):
        updating.check("a?b", {})


@given(json_values, st.integers(0, 2**32))
def test_key_order_never_matters_and_types_always_do(value: Any, seed: int) -> None:
    assert same_json(value, _shuffled(value, random.Random(seed)))
    assert same_json(value, json.loads(json.dumps(value)))  # what the file holds, parsed
    assert not same_json([value], [value, None])
    assert same_json(1, 1) and not same_json(1, 1.0) and not same_json(True, 1) and not same_json(0.0, -0.0)
