"""The CI regression gate (``nlq2sql gate``) on recorded runs.

Every run here is made by scoring a responses file offline (``nlq2sql score``), so which items
are right or wrong, and with which error class, is chosen exactly: the held-out set has 60
items, so one item is 1.667 percentage points and the default bound (5 pp) is 3 items.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from retail import retail_wh
from rich.console import Console
from typer.testing import CliRunner

from nlq2sql.cli import _common as cli_common
from nlq2sql.cli import main as cli_main
from nlq2sql.cli.main import app
from nlq2sql.errors import InputError
from nlq2sql.experiments.gate import GateConfig, GateResult, run_gate
from nlq2sql.experiments.gate_report import render_junit
from nlq2sql.records.store import RECORDS, SUMMARY, records_digest
from nlq2sql.stages.evalset import load_evalset

runner = CliRunner()
IDS = [c.id for c in load_evalset("heldout", retail_wh()).cases]
N = len(IDS)

#: run name → {item id: how that item is answered wrong} (every other item: its gold intent)
RUNS: dict[str, dict[str, str]] = {
    "base": {i: "metric" for i in IDS[:5]},                          # 55/60
    "same": {i: "metric" for i in IDS[:5]},                          # the same bytes again
    "minus3": {i: "metric" for i in IDS[:8]},                        # 52/60: exactly 5.00 pp lower
    "minus4": {i: "metric" for i in IDS[:9]},                        # 51/60: 6.67 pp lower
    "minus5": {i: "metric" for i in IDS[:10]},                       # 50/60: McNemar p = 1/32
    "newclass": {**{i: "metric" for i in IDS[:4]}, IDS[4]: "dimension"},   # 55/60, a new class
    "invalid": {**{i: "metric" for i in IDS[:4]}, IDS[4]: "garbage"},      # 55/60, one unparseable
    "mixed": {i: "metric" for i in IDS[5:9]},                        # 4 right→wrong, 5 wrong→right
}


def _responses(path: Path, wrong: dict[str, str]) -> Path:
    rows = []
    for case in load_evalset("heldout", retail_wh()).cases:
        gold = case.gold.model_dump(mode="json")
        how = wrong.get(case.id)
        if how == "metric":
            gold["metric"] = "units" if gold["metric"] != "units" else "orders"
        elif how == "dimension":
            gold["dimension"] = "channel" if gold["dimension"] != "channel" else "region"
        text = "{not json" if how == "garbage" else json.dumps(gold)
        rows.append({"id": case.id, "text": text, "finish_reason": "stop"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, cache_root: Path, small_warehouse: Path) -> dict[str, Path]:
    """The recorded runs above (and one on the dev set), scored once for the module."""
    root = tmp_path_factory.mktemp("gate-runs")
    made: dict[str, Path] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NLQ2SQL_CACHE_DIR", str(cache_root))
        for name, wrong in RUNS.items():
            resp = _responses(root / f"{name}.jsonl", wrong)
            res = runner.invoke(app, ["score", "--evalset", "heldout", "--responses", str(resp),
                                      "--out", str(root / name), "--json"])
            assert res.exit_code == 0, res.output
            made[name] = root / name
        dev = root / "dev.jsonl"
        dev.write_text("".join(json.dumps({"id": c.id, "text": json.dumps(c.gold.model_dump(mode="json"))})
                               + "\n" for c in load_evalset("dev", retail_wh()).cases))
        res = runner.invoke(app, ["score", "--evalset", "dev", "--responses", str(dev), "--out", str(root / "dev")])
        assert res.exit_code == 0, res.output
        made["dev"] = root / "dev"
    return made


@pytest.fixture(autouse=True)
def wide_errors(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Error lines unwrapped, so a long temp path stays on one line."""
    for module in (cli_common, cli_main):
        monkeypatch.setattr(module, "err", Console(stderr=True, width=10_000))
    yield


def gate(base: Path, cand: Path, *extra: str) -> Any:
    return runner.invoke(app, ["gate", "--baseline", str(base), "--candidate", str(cand), *extra])


def copy(run: Path, dest: Path) -> Path:
    shutil.copytree(run, dest)
    return dest


def checks(res: GateResult) -> dict[str, str]:
    return {c.id: c.status for c in res.checks}


def rewrite_records(run: Path, edit: Any) -> None:
    """Edit each record of a run and re-record the digest, as a genuine run would have it."""
    recs = [json.loads(line) for line in (run / RECORDS).read_text().splitlines()]
    (run / RECORDS).write_text("".join(json.dumps(edit(i, r)) + "\n" for i, r in enumerate(recs)))
    summary = json.loads((run / SUMMARY).read_text())
    summary["records"] = records_digest(run / RECORDS).to_json()
    (run / SUMMARY).write_text(json.dumps(summary))


# -- the accuracy bound: exactly the threshold passes, one item more fails ------------------------

def test_identical_runs_pass(runs: dict[str, Path]) -> None:
    res = run_gate(GateConfig(baseline=runs["base"], candidate=runs["same"], require_identical=True))
    assert res.verdict == "pass" and res.exit_code == 0 and res.paired == N
    assert checks(res) == {"coverage": "pass", "accuracy_mcnemar": "pass", "accuracy_drop": "pass",
                           "schema_valid": "pass", "new_error_classes": "pass",
                           "p95_latency": "not measured", "byte_identity": "pass"}
    assert all(i.identical for i in res.items) and not res.flipped("right_to_wrong")


def test_drop_of_exactly_the_threshold_passes(runs: dict[str, Path]) -> None:
    res = run_gate(GateConfig(baseline=runs["base"], candidate=runs["minus3"]))
    drop = next(c for c in res.checks if c.id == "accuracy_drop")
    assert drop.numbers["drop_pp"] == pytest.approx(5.0) and drop.status == "pass"
    assert "drop 5.00 pp = max 5 pp" in drop.detail
    assert res.verdict == "pass"
    assert [i.id for i in res.flipped("right_to_wrong")] == IDS[5:8]
    # CLI: exit 0, and the same boundary under a bound the user writes as a decimal
    assert gate(runs["base"], runs["minus3"]).exit_code == 0
    assert gate(runs["base"], runs["minus3"], "--max-drop", "4.99").exit_code == 1


def test_drop_of_one_item_more_fails(runs: dict[str, Path]) -> None:
    res = run_gate(GateConfig(baseline=runs["base"], candidate=runs["minus4"]))
    assert checks(res)["accuracy_drop"] == "fail" and res.verdict == "fail"
    assert checks(res)["accuracy_mcnemar"] == "pass"  # 4 vs 0: one-sided p = 1/16, not below 0.05
    mc = next(c for c in res.checks if c.id == "accuracy_mcnemar")
    assert mc.numbers["p_one_sided"] == pytest.approx(1 / 16)
    cli = gate(runs["base"], runs["minus4"])
    assert cli.exit_code == 1 and "gate failed: accuracy_drop" in cli.stderr
    assert "# Regression gate: FAIL" in cli.stdout and "6.67 pp > max 5 pp" in cli.stdout
    # a looser bound lets the same candidate through
    assert gate(runs["base"], runs["minus4"], "--max-drop", "6.7").exit_code == 0


def test_significant_mcnemar_drop_fails_within_the_drop_bound(runs: dict[str, Path]) -> None:
    res = run_gate(GateConfig(baseline=runs["base"], candidate=runs["minus5"], max_drop=10))
    assert checks(res)["accuracy_drop"] == "pass"  # 8.33 pp ≤ 10
    mc = next(c for c in res.checks if c.id == "accuracy_mcnemar")
    assert mc.status == "fail" and mc.numbers["p_one_sided"] == pytest.approx(1 / 32)
    assert mc.numbers["right_to_wrong"] == 5 and mc.numbers["wrong_to_right"] == 0
    assert [c.id for c in res.failed] == ["accuracy_mcnemar"]
    # a stricter alpha makes the same drop not significant
    assert gate(runs["base"], runs["minus5"], "--max-drop", "10", "--alpha", "0.01").exit_code == 0
    assert gate(runs["base"], runs["minus5"], "--max-drop", "10").exit_code == 1


def test_improvement_passes_and_flips_both_ways_are_listed(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "gate"
    res = gate(runs["base"], runs["mixed"], "--out", str(out))
    assert res.exit_code == 0, res.output
    md = (out / "gate.md").read_text()
    assert md.startswith("# Regression gate: PASS")
    r2w, w2r = md.index("## Flipped right → wrong (4)"), md.index("## Flipped wrong → right (5)")
    assert r2w < w2r
    for i in IDS[5:9]:
        assert r2w < md.index(f"| {i} |") < w2r
    for i in IDS[:5]:
        assert md.index(f"| {i} |") > w2r
    assert md == res.stdout  # what CI prints is what it keeps


# -- other checks --------------------------------------------------------------------------------

def test_new_error_class_fails(runs: dict[str, Path]) -> None:
    res = run_gate(GateConfig(baseline=runs["base"], candidate=runs["newclass"]))
    assert [c.id for c in res.failed] == ["new_error_classes"]
    new = next(c for c in res.checks if c.id == "new_error_classes")
    assert new.numbers["new"] == "wrong_dimension" and new.numbers["new_items"] == 1
    assert checks(res)["accuracy_drop"] == "pass" and checks(res)["schema_valid"] == "pass"
    # identity is reported, not judged, unless asked
    ident = next(c for c in res.checks if c.id == "byte_identity")
    assert ident.status == "not checked" and ident.numbers["changed"] == 1 and IDS[4] in ident.detail
    assert [i.id for i in res.items if not i.identical] == [IDS[4]]
    cli = gate(runs["base"], runs["newclass"], "--require-identical")
    assert cli.exit_code == 1 and "byte_identity" in cli.stderr and "new_error_classes" in cli.stderr


def test_schema_valid_rate_lower_fails(runs: dict[str, Path]) -> None:
    res = run_gate(GateConfig(baseline=runs["base"], candidate=runs["invalid"]))
    assert {c.id for c in res.failed} == {"schema_valid", "new_error_classes"}
    sv = next(c for c in res.checks if c.id == "schema_valid")
    assert (sv.numbers["baseline_valid"], sv.numbers["candidate_valid"]) == (60, 59)
    # the other way round, the schema-valid rate rose and the class disappeared: pass
    assert run_gate(GateConfig(baseline=runs["invalid"], candidate=runs["base"])).verdict == "pass"


def test_latency_not_measured_not_checked_pass_and_fail(runs: dict[str, Path], tmp_path: Path) -> None:
    base, cand = copy(runs["base"], tmp_path / "b"), copy(runs["same"], tmp_path / "c")
    # offline-scored runs recorded no latency: never judged, even with a bound
    res = run_gate(GateConfig(baseline=base, candidate=cand, max_p95_rise=10))
    lat = next(c for c in res.checks if c.id == "p95_latency")
    assert lat.status == "not measured" and res.verdict == "pass"
    # 4 samples are still too few
    rewrite_records(base, lambda i, r: {**r, "latency_s": 1.0 + i / 100 if i < 4 else None})
    rewrite_records(cand, lambda i, r: {**r, "latency_s": 1.0 + i / 100})
    lat = next(c for c in run_gate(GateConfig(baseline=base, candidate=cand, max_p95_rise=10)).checks
               if c.id == "p95_latency")
    assert lat.status == "not measured" and lat.numbers["baseline_n"] == 4
    # every item timed; the candidate 1.5× slower
    rewrite_records(base, lambda i, r: {**r, "latency_s": 1.0 + i / 100})
    rewrite_records(cand, lambda i, r: {**r, "latency_s": 1.5 * (1.0 + i / 100)})
    res = run_gate(GateConfig(baseline=base, candidate=cand))
    lat = next(c for c in res.checks if c.id == "p95_latency")
    assert lat.status == "not checked" and lat.numbers["rise_pct"] == pytest.approx(50.0)
    assert res.verdict == "pass"
    assert checks(run_gate(GateConfig(baseline=base, candidate=cand, max_p95_rise=49)))["p95_latency"] == "fail"
    assert checks(run_gate(GateConfig(baseline=base, candidate=cand, max_p95_rise=51)))["p95_latency"] == "pass"
    cli = gate(base, cand, "--max-p95-rise", "20")
    assert cli.exit_code == 1 and "gate failed: p95_latency" in cli.stderr


def test_candidate_missing_items_fails_coverage(runs: dict[str, Path], tmp_path: Path) -> None:
    cand = copy(runs["same"], tmp_path / "c")
    lines = (cand / RECORDS).read_text().splitlines(keepends=True)
    (cand / RECORDS).write_text("".join(lines[:50]))
    summary = json.loads((cand / SUMMARY).read_text())
    summary.update(n=50, records=records_digest(cand / RECORDS).to_json())
    (cand / SUMMARY).write_text(json.dumps(summary))
    res = run_gate(GateConfig(baseline=runs["base"], candidate=cand))
    assert [c.id for c in res.failed] == ["coverage"] and res.paired == 50
    assert res.baseline_only == IDS[50:]
    # the reverse (the candidate has more) is reported, not failed
    rev = run_gate(GateConfig(baseline=cand, candidate=runs["base"]))
    assert rev.verdict == "pass" and rev.candidate_only == IDS[50:]


# -- outputs -------------------------------------------------------------------------------------

def test_junit_lists_every_item_and_check(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "ci"
    res = gate(runs["base"], runs["minus4"], "--out", str(out))
    assert res.exit_code == 1
    assert sorted(p.name for p in out.iterdir()) == ["gate.json", "gate.md", "junit.xml"]
    root = ET.parse(out / "junit.xml").getroot()
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    items = suites["items"].findall("testcase")
    assert [tc.get("name") for tc in items] == sorted(IDS)
    failed = [tc.get("name") for tc in items if tc.find("failure") is not None]
    assert failed == IDS[5:9] and suites["items"].get("failures") == "4"
    gate_checks = {tc.get("name"): tc for tc in suites["gate checks"].findall("testcase")}
    assert set(gate_checks) == {"coverage", "accuracy_mcnemar", "accuracy_drop", "schema_valid",
                                "new_error_classes", "p95_latency", "byte_identity"}
    assert gate_checks["accuracy_drop"].find("failure") is not None
    assert gate_checks["p95_latency"].find("skipped") is not None
    assert root.get("tests") == str(N + 7) and root.get("failures") == "5"
    data = json.loads((out / "gate.json").read_text())
    assert GateResult.model_validate(data).verdict == "fail"
    md = (out / "gate.md").read_text()
    assert "| final accuracy: drop bound (`accuracy_drop`) | **fail** |" in md


def test_junit_is_valid_xml_for_odd_text(runs: dict[str, Path]) -> None:
    res = run_gate(GateConfig(baseline=runs["base"], candidate=runs["minus4"]))
    odd = res.model_copy(update={"items": [res.items[0].model_copy(
        update={"id": "a<b>&\x01\"", "question": "q\x00 ]]>", "flip": "right_to_wrong"})]})
    root = ET.fromstring(render_junit(odd))
    tc = next(t for t in root.iter("testcase") if t.get("classname") == "items")
    assert tc.get("name") == "a<b>&\ufffd\"" and tc.find("failure") is not None


def test_print_only_writes_nothing(runs: dict[str, Path], tmp_path: Path) -> None:
    before = sorted(p.name for p in runs["base"].parent.iterdir())
    res = gate(runs["base"], runs["minus4"])
    assert res.exit_code == 1 and "## Flipped right → wrong (4)" in res.stdout
    assert sorted(p.name for p in runs["base"].parent.iterdir()) == before


# -- refusals: exit 2, one line, nothing written ------------------------------------------------

def refused(res: Any, *fragments: str) -> None:
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1, res.stderr
    for f in fragments:
        assert f in res.stderr, res.stderr
    assert "Traceback" not in res.output and res.stdout == ""


def test_refuses_different_eval_sets(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "o"
    refused(gate(runs["base"], runs["dev"], "--out", str(out)), "different eval sets", "'heldout'", "'dev'")
    assert not out.exists()


def test_refuses_different_warehouses(runs: dict[str, Path], tmp_path: Path) -> None:
    cand = copy(runs["same"], tmp_path / "c")
    manifest = json.loads((cand / "manifest.json").read_text())
    manifest.update(semantic_model="tpch", semantic_model_sha256="0" * 64, layer_sha256="1" * 64)
    (cand / "manifest.json").write_text(json.dumps(manifest))
    refused(gate(runs["base"], cand), "different semantic layers", "tpch")
    manifest.update(db_sha256="2" * 64)
    (cand / "manifest.json").write_text(json.dumps(manifest))
    refused(gate(runs["base"], cand), "different warehouses", "database")


def test_the_same_layer_by_content_passes_whatever_its_path_or_file_hash(runs: dict[str, Path],
                                                                        tmp_path: Path) -> None:
    """Runs identify their layer by content (``layer_sha256``): read from another path, or hashed
    by another release (``semantic_model_sha256`` differs), it is the same layer."""
    base = json.loads((runs["base"] / "manifest.json").read_text())
    assert len(base["layer_sha256"]) == 64
    cand = copy(runs["same"], tmp_path / "c")
    manifest = json.loads((cand / "manifest.json").read_text())
    manifest.update(semantic_model_path="elsewhere/semantic_model.yml", semantic_model_sha256="0" * 64)
    (cand / "manifest.json").write_text(json.dumps(manifest))
    assert gate(runs["base"], cand).exit_code == 0
    old = copy(runs["same"], tmp_path / "o")  # an older run: no layer content, another file hash
    manifest = json.loads((old / "manifest.json").read_text())
    manifest.pop("layer_sha256")
    manifest.update(semantic_model_sha256="0" * 64)
    (old / "manifest.json").write_text(json.dumps(manifest))
    assert gate(runs["base"], old).exit_code == 0, "the same layer by name on the same data"


def test_missing_warehouse_hash_means_the_default_warehouse(runs: dict[str, Path], tmp_path: Path) -> None:
    def strip(run: Path) -> Path:
        m = json.loads((run / "manifest.json").read_text())
        for k in ("semantic_model", "semantic_model_path", "semantic_model_sha256", "layer_sha256"):
            m.pop(k)
        (run / "manifest.json").write_text(json.dumps(m))
        return run

    old_b, old_c = strip(copy(runs["base"], tmp_path / "b")), strip(copy(runs["same"], tmp_path / "c"))
    assert gate(old_b, old_c).exit_code == 0          # both older runs: both retail
    assert gate(old_b, runs["same"]).exit_code == 0   # an older run vs a retail run
    tpch = copy(runs["same"], tmp_path / "t")
    m = json.loads((tpch / "manifest.json").read_text())
    m["semantic_model"], m["semantic_model_sha256"], m["layer_sha256"] = "tpch", "f" * 64, "e" * 64
    (tpch / "manifest.json").write_text(json.dumps(m))
    refused(gate(old_b, tpch), "different warehouses", "(not recorded: the default)")


@pytest.mark.parametrize("damage, fragment", [
    ("drop_last", "readable records, but the summary was computed from 60"),
    ("torn_last", "readable records, but the summary was computed from 60"),
    ("malformed_middle", "malformed record"),
    ("edited", "changed after its summary was written"),
    ("old_summary_short", "59 readable records, but the summary counts 60"),
    ("no_records", "records.jsonl: missing"),
    ("no_summary", "summary.json: missing"),
])
def test_refuses_corrupt_records(runs: dict[str, Path], tmp_path: Path, damage: str, fragment: str) -> None:
    cand = copy(runs["same"], tmp_path / "c")
    path = cand / RECORDS
    lines = path.read_text().splitlines(keepends=True)
    if damage == "drop_last":
        path.write_text("".join(lines[:-1]))
    elif damage == "torn_last":
        path.write_text("".join(lines[:-1]) + lines[-1][:40])
    elif damage == "malformed_middle":
        path.write_text("".join(lines[:10]) + "{oops\n" + "".join(lines[11:]))
    elif damage == "edited":
        path.write_text("".join(lines).replace('"correct_final":true', '"correct_final":false', 1))
    elif damage == "old_summary_short":  # a run from before summaries kept a digest: only n
        s = json.loads((cand / SUMMARY).read_text())
        s.pop("records")
        (cand / SUMMARY).write_text(json.dumps(s))
        path.write_text("".join(lines[:-1]))
    elif damage == "no_records":
        path.unlink()
    elif damage == "no_summary":
        (cand / SUMMARY).unlink()
    out = tmp_path / "o"
    refused(gate(runs["base"], cand, "--out", str(out)), fragment, str(cand))
    assert not out.exists()


def test_refuses_duplicate_ids_and_records_without_correctness(runs: dict[str, Path], tmp_path: Path) -> None:
    dup = copy(runs["same"], tmp_path / "d")
    rewrite_records(dup, lambda i, r: {**r, "id": IDS[0]} if i == 1 else r)
    refused(gate(runs["base"], dup), "duplicate id 'ho-001'", f"{dup / RECORDS}:2")
    bad = copy(runs["same"], tmp_path / "x")
    rewrite_records(bad, lambda i, r: {k: v for k, v in r.items() if k != "correct_final"} if i == 2 else r)
    refused(gate(runs["base"], bad), f"{bad / RECORDS}:3: field 'correct_final'")
    odd = copy(runs["same"], tmp_path / "i")  # read through the record type: a value of the wrong type is named
    rewrite_records(odd, lambda i, r: {**r, "id": 7} if i == 4 else r)
    refused(gate(runs["base"], odd), f"{odd / RECORDS}:5: field 'id'", "not a valid record")


def test_refuses_what_is_not_a_run(runs: dict[str, Path], tmp_path: Path) -> None:
    refused(gate(runs["base"], tmp_path / "nowhere"), "no such run directory")
    refused(gate(tmp_path, runs["base"]), "not a run directory")
    afile = tmp_path / "f.txt"
    afile.write_text("x")
    refused(gate(runs["base"], runs["same"], "--out", str(afile)), "--out", "not a directory")


@pytest.mark.parametrize("args, option", [
    (["--alpha", "0"], "--alpha"), (["--alpha", "1.5"], "--alpha"), (["--max-drop", "-1"], "--max-drop"),
    (["--max-drop", "101"], "--max-drop"), (["--max-p95-rise", "-5"], "--max-p95-rise"),
    (["--alpha", "nan"], "--alpha"),
])
def test_refuses_bad_bounds(runs: dict[str, Path], args: list[str], option: str) -> None:
    refused(gate(runs["base"], runs["same"], *args), option)


def test_library_config_validates_like_the_cli(runs: dict[str, Path]) -> None:
    with pytest.raises(ValidationError):
        GateConfig(baseline=runs["base"], candidate=runs["same"], max_drop=-1)
    with pytest.raises(ValidationError):
        GateConfig(baseline=runs["base"], candidate=runs["same"], alpha=float("nan"))
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        GateConfig(baseline=runs["base"], candidate=runs["same"], max_dorp=3)  # type: ignore[call-arg]
    res = run_gate(GateConfig(baseline=runs["base"], candidate=runs["same"]))
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        GateResult.model_validate({**res.model_dump(), "surprise": 1})
    assert GateResult.model_validate_json(res.model_dump_json()) == res
    with pytest.raises(InputError, match="different eval sets"):
        run_gate(GateConfig(baseline=runs["base"], candidate=runs["dev"]))
