"""Run identity by content: ``gate``, ``compare`` and ``load-check --runs`` take two runs of one layer
on one database as the same warehouse whatever path or harness release read the layer, and say
which manifest field differs (both values) when they are not.

The runs are a committed run (recorded before ``layer_sha256`` existed) and copies of it whose
manifest is rewritten as another checkout, an older release or a newer one would have written it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from repo_paths import ROOT
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.experiments.identity import RunIdentity, difference

runner = CliRunner()
RUN = ROOT / "reports/main-job-v2/heldout"  # retail, no layer_sha256
SHA = "13c0ccf6fd474d331091420e0795e2ae6db5e199c73e24d43ec3f405f940131f"  # its db_sha256


def variant(tmp: Path, name: str, **changes: object) -> Path:
    """A copy of the committed run whose manifest has ``changes`` (None: the key removed)."""
    out = tmp / name
    shutil.copytree(RUN, out)
    m = json.loads((out / "manifest.json").read_text())
    for k, v in changes.items():
        if v is None:
            m.pop(k, None)
        else:
            m[k] = v
    (out / "manifest.json").write_text(json.dumps(m, indent=2))
    return out


#: As another checkout and an older harness release would record the same layer and data.
ELSEWHERE = {"semantic_model_path": "../other-checkout/warehouses/retail/semantic_model.yml",
             "harness_version": "0.0.9", "semantic_model_sha256": "0" * 64}


def flat(text: str) -> str:
    return " ".join(text.split())


def test_gate_accepts_the_same_layer_from_another_path_and_release(tmp_path: Path) -> None:
    other = variant(tmp_path, "other", **ELSEWHERE)
    newer = variant(tmp_path, "newer", layer_sha256="a" * 64)  # a newer run names its layer by content
    for base, cand in ((RUN, other), (other, newer), (newer, RUN)):
        res = runner.invoke(app, ["gate", "--baseline", str(base), "--candidate", str(cand)])
        assert res.exit_code == 0, res.output


def test_gate_refuses_another_layer_or_data_naming_the_field_and_both_values(tmp_path: Path) -> None:
    a = variant(tmp_path, "a", layer_sha256="a" * 64)
    b = variant(tmp_path, "b", layer_sha256="b" * 64, **ELSEWHERE)
    res = runner.invoke(app, ["gate", "--baseline", str(a), "--candidate", str(b)])
    assert res.exit_code == 2
    assert all(s in flat(res.output) for s in ("different semantic layers", "layer_sha256", "a" * 64, "b" * 64))
    tpch = variant(tmp_path, "tpch", semantic_model="tpch", semantic_model_sha256="f" * 64)  # older: by name
    res = runner.invoke(app, ["gate", "--baseline", str(RUN), "--candidate", str(tpch)])
    assert res.exit_code == 2
    assert all(s in flat(res.output) for s in ("(semantic_model)", "retail", "tpch", "f" * 64))
    data = variant(tmp_path, "data", db_sha256="d" * 64)
    res = runner.invoke(app, ["gate", "--baseline", str(RUN), "--candidate", str(data)])
    assert res.exit_code == 2
    assert all(s in flat(res.output) for s in ("different warehouses", "db_sha256", SHA, "d" * 64))


def test_load_check_runs_take_one_layer_and_refuse_another(tmp_path: Path) -> None:
    other = variant(tmp_path, "other", **ELSEWHERE)
    res = runner.invoke(app, ["load-check", "--runs", str(RUN), "--runs", str(other), "--out", str(tmp_path / "lc")])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "lc" / "loadcheck.json").read_text())["identical_items"] == 60
    data = variant(tmp_path, "data", db_sha256="d" * 64)
    res = runner.invoke(app, ["load-check", "--runs", str(other), "--runs", str(data), "--out", str(tmp_path / "x")])
    assert res.exit_code == 2
    out = flat(res.output)
    assert "data/manifest.json: field 'db_sha256'" in out and SHA in out and "d" * 64 in out


def test_compare_pairs_the_same_layer_and_names_what_differs_otherwise(tmp_path: Path) -> None:
    other = variant(tmp_path, "other", **ELSEWHERE)
    layer = variant(tmp_path, "layer", layer_sha256="c" * 64, semantic_model="retail2",
                    semantic_model_sha256="e" * 64)
    res = runner.invoke(app, ["compare", str(RUN), str(other), str(layer), "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    md = flat((tmp_path / "r" / "report.md").read_text())
    assert md.count("not paired") == 1  # the copy from elsewhere is paired; the other layer is not
    assert "not paired (different warehouses: the baseline's semantic model (semantic_model) is retail" in md
    assert "this run's is retail2 (semantic_model_sha256 " + "e" * 64 in md


hexes = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)


@given(path=st.text(min_size=1, max_size=40), file_sha=st.one_of(st.none(), hexes), layer=hexes, db=hexes)
def test_paths_and_file_hashes_never_decide_when_the_layer_is_named(path: str, file_sha: str | None, layer: str,
                                                                      db: str) -> None:
    """Two runs naming the same layer and data are the same, whatever else they recorded; another
    layer content is always a difference naming layer_sha256."""
    a = RunIdentity.of({"semantic_model": "retail", "semantic_model_sha256": "1" * 64, "layer_sha256": layer,
                        "db_sha256": db, "semantic_model_path": "warehouses/retail/semantic_model.yml"})
    b = RunIdentity.of({"semantic_model": "retail", "semantic_model_sha256": file_sha, "layer_sha256": layer,
                        "db_sha256": db, "semantic_model_path": path})
    assert difference(a, b) is None
    other = RunIdentity.of({"semantic_model": "retail", "layer_sha256": "f" * 64 if layer != "f" * 64 else "0" * 64,
                            "db_sha256": db})
    diff = difference(a, other)
    assert diff is not None and diff.field == "layer_sha256" and layer in diff.base
