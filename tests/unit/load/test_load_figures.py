"""Typed level stats read back: a finished level's ``level.json`` is the Level it was, key for key;
an older file's keys stay its own; a bad one is one message naming the file and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from repo_paths import FIXTURES

from nlq2sql.errors import RecordError
from nlq2sql.load.contract import LevelStats as Level
from nlq2sql.load.levels import LEVEL, run_level, stats_from_run
from nlq2sql.run.config import EvalConfig

RUN = FIXTURES / "view-runs" / "smollm2-135m" / "load-check" / "c16-r0"


def test_a_level_reads_back_as_it_was_written(tmp_path: Path) -> None:
    st = stats_from_run(RUN)
    (tmp_path / LEVEL).write_text(json.dumps(st.to_json()))
    back = run_level(EvalConfig(), tmp_path / "x.jsonl", 16, tmp_path, reuse=True)  # a kept level: not re-run
    assert back == st and list(back.to_json()) == list(st.to_json())
    assert back.concurrency == 16 and back.client and back.client.inflight_n == back.n


def test_an_older_levels_keys_stay_its_own() -> None:
    old = stats_from_run(RUN).to_json()
    for key in ("latency_from_arrival_s", "queued_s", "offered_rate", "duration_s", "not_sent"):
        del old[key]  # a sweep written before the open loop
    assert list(Level.from_json(old).to_json()) == list(old)


def test_a_bad_level_json_names_the_file_and_field(tmp_path: Path) -> None:
    st = stats_from_run(RUN).to_json()
    st["server"]["running"]["n"] = "many"
    (tmp_path / LEVEL).write_text(json.dumps(st))
    with pytest.raises(RecordError) as exc:
        run_level(EvalConfig(), tmp_path / "x.jsonl", 16, tmp_path, reuse=True)
    assert exc.value.field == "server.running.n" and exc.value.path == str(tmp_path / LEVEL)
    assert "Input should be a valid integer" in str(exc.value)
