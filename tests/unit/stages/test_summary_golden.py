"""One aggregator, the same summaries: every run committed at ``summary_cases.COMMIT`` summarised as
scored and as unscored items (and re-scoring's shared adds, and ``batch``'s shard summary) is, as
parsed JSON, its per-case snapshot under ``tests/snapshots/test_summary_golden/`` (one file per run
and way of summarising; ``pytest --snapshot-update`` rewrites them, see ``docs/testing.md``)."""

from __future__ import annotations

import json
from pathlib import Path

from snapshot import Snapshots
from summary_cases import COMMIT, cases, runs_at


def test_every_summary_is_its_snapshot(tmp_path: Path, snapshot: Snapshots) -> None:
    runs = runs_at(COMMIT)
    names = []
    for name, text in cases(tmp_path, runs, COMMIT):
        names.append(name)
        snapshot.check(name, json.loads(text))
    snapshot.assert_complete()
    assert len(names) > 900 and any(n.endswith(":shards-unscored") for n in names)
    assert len(names) == len(set(names)) and len(runs) > 150
