"""Issue 27: ``batch --resume`` -- a batch killed at any point (its driver SIGKILLed, the moment
it started, once its manifest is written, mid-run) and resumed at once ends with the shards,
records and summary of an uninterrupted batch: every item once, in the shard an uninterrupted
run puts it in.  And ``--out`` on object storage through pyarrow's filesystems: ``file://``
through the whole Ray job; the storage layer itself on pyarrow's in-process mock filesystem
(the offline stand-in for a bucket); any other scheme refused in one line, nothing written.

Fake server (0.3 s per answer, so kills land mid-run); the batch runs as a real process, with
its own local Ray.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, script
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.run.batch_out import BatchOut, shard_name
from nlq2sql.run.batch_shards import iter_shard_records

pytest.importorskip("ray.data")

MODEL, N, ROWS = "fake-model", 24, 4
TIMING = {"latency_s", "ttft_s", "itl_mean_s", "itl_max_s", "started", "chunks", "attempts", "retry_waits_s"}
#: Summary figures that are results (the rest measure time or the session).
FIGURES = ("n", "raw_accuracy", "final_accuracy", "execution_accuracy", "schema_valid_rate", "interventions",
           "field_accuracy", "status_counts", "error_taxonomy_raw", "error_taxonomy_final", "finish_reasons",
           "confusion_matrix", "outcomes", "errors_by_class", "retries_used")
#: When the driver is killed: as soon as it started, once its manifest exists, with shards on disk.
KILL_POINTS = ("immediately", "manifest", "mid-run")


@pytest.fixture(scope="module")
def env(cache_root: Path, small_warehouse: Path) -> dict[str, str]:
    return dict(os.environ, NLQ2SQL_CACHE_DIR=str(cache_root))


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeServer]:
    with FakeServer(tmp_path_factory.mktemp("fake"), script(), model=MODEL, delay_s=0.3) as f:
        yield f


def argv(url: str, out: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "nlq2sql.cli", "batch", "--evalset", "heldout", "--endpoint", url, "--model",
            MODEL, "--limit", str(N), "--shard-rows", str(ROWS), "--actors", "2", "--concurrency", "2",
            "--timeout", "30", "--out", out, "--json", *extra]


def shards_of(out: Path) -> dict[str, list[str]]:
    """Each shard file's item ids, in order (a killed run's temporary files are not shards)."""
    store = BatchOut.open(out)
    return {name: [json.loads(t)["id"] for t in store.shard_lines(name)] for name in store.shards("parquet")}


def records(out: Path | str) -> dict[str, dict[str, Any]]:
    recs = list(iter_shard_records(out))
    ids = [r["id"] for r in recs]
    assert len(ids) == len(set(ids)), f"twice: {[i for i, n in Counter(ids).items() if n > 1]}"
    return {r["id"]: {k: v for k, v in r.items() if k not in TIMING} for r in sorted(recs, key=lambda r: r["id"])}


@pytest.fixture(scope="module")
def reference(fake: FakeServer, env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
              ) -> tuple[Path, dict[str, Any]]:
    """An uninterrupted batch, written through a file:// URI (pyarrow's local filesystem)."""
    out = tmp_path_factory.mktemp("ref") / "batch"
    res = subprocess.run(argv(fake.url, out.as_uri()), cwd=PROJECT_ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads(res.stdout)
    assert summary["records"]["count"] == N and summary["resumed"] == {"sessions": 1, "shards_kept": 0}
    assert [s["file"] for s in summary["records"]["shards"]] == [f"records/{shard_name(k, 'parquet')}"
                                                                 for k in range(N // ROWS)]
    assert json.loads((out / "manifest.json").read_text())["out"] == out.as_uri()
    # A complete batch resumed again is left as it is: its summary, no request sent.
    sent = len(fake.chat_requests())
    again = subprocess.run(argv(fake.url, out.as_uri(), "--resume"), cwd=PROJECT_ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout) == summary and len(fake.chat_requests()) == sent
    return out, summary


def test_a_killed_batch_resumed_at_once_equals_an_uninterrupted_one(
        fake: FakeServer, env: dict[str, str], reference: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    ref_out, ref_summary = reference
    kept = []
    for point in KILL_POINTS:
        out = tmp_path / point / "batch"
        log = open(tmp_path / f"{point}.log", "w")  # noqa: SIM115 -- closed below
        proc = subprocess.Popen(argv(fake.url, str(out)), cwd=PROJECT_ROOT, env=env, stdout=subprocess.DEVNULL,
                                stderr=log, start_new_session=True)
        try:
            deadline = time.monotonic() + 240
            while point != "immediately":
                assert proc.poll() is None, (tmp_path / f"{point}.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "the batch never got there"
                if (out / "manifest.json").exists() and (point == "manifest" or len(shards_of(out)) >= 2):
                    break
                time.sleep(0.01)
            os.kill(proc.pid, signal.SIGKILL)  # the driver alone
            proc.wait()
            on_disk = len(shards_of(out)) if out.exists() else 0
            kept.append(on_disk)
            res = subprocess.run(argv(fake.url, str(out), "--resume"), cwd=PROJECT_ROOT, env=env,
                                 capture_output=True, text=True, timeout=300)
            assert res.returncode == 0, res.stderr[-3000:]
        finally:
            with contextlib.suppress(ProcessLookupError):  # what the driver left in its group (Ray's agents)
                os.killpg(proc.pid, signal.SIGKILL)
            log.close()
        summary = json.loads(res.stdout)
        assert shards_of(out) == shards_of(ref_out), point  # the same items in the same shards, each once
        assert records(out) == records(ref_out), point
        for key in FIGURES:
            assert summary[key] == ref_summary[key], (point, key)
        assert summary["records"]["count"] == N and summary["resumed"]["shards_kept"] >= on_disk
        assert summary["throughput"]["items_this_session"] == N - ROWS * summary["resumed"]["shards_kept"]
        assert not [p for p in (out / "records").iterdir() if p.name.startswith(".")], "a temporary file was left"
    print(f"\nbatch driver killed with {kept} shards on disk; resumed at once: shards = uninterrupted")
    assert kept[0] == 0 and kept[1] < N // ROWS and kept[2] >= 2, kept


def test_resume_refuses_another_cut_and_force_replaces(fake: FakeServer, reference: tuple[Path, dict[str, Any]],
                                                       tmp_path: Path) -> None:
    ref_out, _ = reference
    out = tmp_path / "batch"
    (out / "records").mkdir(parents=True)
    (out / "manifest.json").write_text((ref_out / "manifest.json").read_text())
    base = argv(fake.url, str(out))[3:]
    res = CliRunner().invoke(app, [*[a if a != str(ROWS) else "3" for a in base], "--resume"])
    assert res.exit_code == 2, res.output
    assert "cannot resume: the batch differs (shard_rows: was 4, now 3)" in " ".join(res.output.split())
    res = CliRunner().invoke(app, [*base, "--resume", "--force"])
    assert res.exit_code == 2 and "give one" in res.output
    res = CliRunner().invoke(app, base)
    assert res.exit_code == 2 and "--resume" in res.output and "--force" in res.output
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "records"]  # untouched


@pytest.mark.parametrize(("out", "message"), [
    ("hdfs://namenode/runs/b", "--out: hdfs:// is not supported: give a local path, or a file://, s3:// or gs://"),
    ("http://example.com/b", "--out: http:// is not supported"),
    ("mock:///b", "--out: mock:// is not supported"),
])
def test_an_unsupported_scheme_is_refused_before_anything(out: str, message: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["batch", "--evalset", "heldout", "--endpoint", "http://127.0.0.1:9/v1",
                                   "--out", out])
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split()) and len(res.output.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_the_storage_layer_on_a_bucket_like_filesystem() -> None:
    """pyarrow's in-process mock filesystem (no directories to rename, as in a bucket): shards are
    written whole, listed in item order, temporaries never listed and swept, state read."""
    import pyarrow.fs as pafs

    store = BatchOut("mock://bucket/run", pafs._MockFileSystem(), "bucket/run")
    assert store.state() == "absent"
    store.make({"kind": "batch"})
    assert store.state() == "run" and store.read_json("manifest.json") == {"kind": "batch"}
    for k in (10, 2, 0):
        for fmt in ("parquet", "jsonl"):
            store.write_shard(k, fmt, [f"i{k}", f"j{k}"], [json.dumps({"id": f"i{k}"}), json.dumps({"id": f"j{k}"})])
    with store.fs.open_output_stream(store.path("records", ".shard-000003.parquet.tmp-dead")) as fh:
        fh.write(b"PAR1 torn")  # a shard being written when its actor died
    for fmt in ("parquet", "jsonl"):
        names = store.shards(fmt)
        assert names == [shard_name(k, fmt) for k in (0, 2, 10)]
        assert [json.loads(t)["id"] for t in store.shard_lines(names[-1])] == ["i10", "j10"]
    assert store.sweep_temps() == 1 and store.sweep_temps() == 0
    store.write_json("summary.json", {})
    assert store.state() == "complete"
    store.clear()
    assert store.state() == "empty"
    store.remove()
    assert store.state() == "absent"
