"""The viewer reads record lines through the record type (``records.item.ItemRecord``), and a line
that is JSON with an id but not a record is still shown, read tolerantly, with a note naming it.

The typed and the tolerant reading give the same columns wherever both apply (every committed
record), so a run's page does not depend on which path read it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from repo_paths import ROOT

from nlq2sql.records.item import ItemRecord, iter_item_records
from nlq2sql.view import build_bundle, load_runs
from nlq2sql.view.bundle import _cue_inputs
from nlq2sql.view.runs import _row

HELDOUT = ROOT / "tests" / "fixtures" / "view-runs" / "heldout-smollm2-135m"


def test_typed_and_tolerant_reading_agree_on_every_committed_record() -> None:
    files = subprocess.run(["git", "ls-files", "*records.jsonl"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    assert len(files) > 100
    n = 0
    for rel in files:
        lines = (ROOT / rel).read_text().splitlines()
        for lineno, (line, rec) in enumerate(zip(lines, iter_item_records(ROOT / rel), strict=True), start=1):
            obj = json.loads(line)
            assert _row(rec.get) == _row(obj.get), f"{rel}:{lineno}"
            if obj.get("interventions"):
                assert _cue_inputs(obj) == (obj["question"], obj["interventions"])
            n += 1
    assert n > 5000


def test_a_line_that_is_no_record_is_shown_as_read_with_a_note(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(HELDOUT, run)
    lines = (run / "records.jsonl").read_text().splitlines()
    recs = [json.loads(line) for line in lines]
    odd = dict(recs[2], correct_final=1, latency_s="slow", status=["x"])  # wrong types: no record
    lines[2] = json.dumps(odd)
    (run / "records.jsonl").write_text("".join(line + "\n" for line in lines))
    [loaded] = load_runs([run], note=None)
    assert loaded.n == len(recs)
    assert loaded.lines[2] == lines[2]
    assert loaded.cols["correct_final"][2] == 0 and loaded.cols["latency_s"][2] is None
    assert loaded.cols["status"][2] == '["x"]'  # shown as read
    assert loaded.cols["id"][2] == recs[2]["id"]
    untyped = [n for n in loaded.notes if "not records" in n]
    assert untyped == ["1 line(s) of records.jsonl are not records, shown as read (first: records.jsonl:3: "
                       "field 'status': not a valid record: Input should be a valid string)"]
    assert str(tmp_path) not in untyped[0]
    # the other lines were read through the type: the same columns as the untouched run
    [fresh] = load_runs([HELDOUT], note=None)
    for key, col in loaded.cols.items():
        assert col[:2] + col[3:] == fresh.cols[key][:2] + fresh.cols[key][3:], key
    assert not any("not records" in n for n in fresh.notes)
    build_bundle([loaded])  # the run's page builds


def test_an_untyped_line_with_interventions_gets_its_cues() -> None:
    rec = next(r for r in iter_item_records(HELDOUT / "records.jsonl") if r.answer.interventions)
    obj = rec.to_json()
    assert _cue_inputs(obj) == (rec.question, rec.answer.interventions)
    odd = dict(obj, id=7, question=None)
    assert _cue_inputs(odd) == ("", obj["interventions"])
    assert isinstance(ItemRecord.from_json(obj), ItemRecord)
