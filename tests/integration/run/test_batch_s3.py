"""Issue 27: ``batch --out s3://…`` on a real S3 protocol server (moto's, on loopback).

A batch written to a bucket, killed mid-run (its process group SIGKILLed: the pod lost) and
resumed, holds the shards and records of an uninterrupted batch written to a local directory;
nothing temporary is left in the bucket; the credentials (from the environment only) appear
in no object, no manifest and no message; credentials in the URI are refused in one line.
The endpoint reaches pyarrow as ``AWS_ENDPOINT_URL``, as it would for MinIO or another S3
service; ``gs://`` is the same code path (pyarrow's ``GcsFileSystem``), not tested live.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow.fs as pafs
import pytest
from fakeserver import FakeServer, script
from moto.server import ThreadedMotoServer
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.run.batch_out import BatchOut

MODEL, N, ROWS = "fake-model", 16, 2
BUCKET, KEY_ID, SECRET = "nlq2sql-test", "nlq2sql-test-key-id", "nlq2sql-test-SECRET-7f3a"
TIMING = {"latency_s", "ttft_s", "itl_mean_s", "itl_max_s", "started", "chunks", "attempts", "retry_waits_s"}
FIGURES = ("n", "raw_accuracy", "final_accuracy", "execution_accuracy", "schema_valid_rate", "status_counts",
           "outcomes", "errors_by_class", "retries_used")


class S3(NamedTuple):
    fs: pafs.S3FileSystem  # the test's own client
    endpoint: str  # host:port


@pytest.fixture(scope="module")
def s3() -> Iterator[S3]:
    """moto's S3 server on a free loopback port, with an empty bucket."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        fs = pafs.S3FileSystem(access_key=KEY_ID, secret_key=SECRET, region="us-east-1", scheme="http",
                               endpoint_override=f"127.0.0.1:{port}", allow_bucket_creation=True)
        fs.create_dir(BUCKET)
        yield S3(fs, f"127.0.0.1:{port}")
    finally:
        server.stop()


@pytest.fixture(scope="module")
def env(cache_root: Path, small_warehouse: Path, s3: S3) -> dict[str, str]:
    """Credentials and endpoint from the environment only, as on a node with a role."""
    return dict(os.environ, NLQ2SQL_CACHE_DIR=str(cache_root), AWS_ACCESS_KEY_ID=KEY_ID,
                AWS_SECRET_ACCESS_KEY=SECRET, AWS_DEFAULT_REGION="us-east-1",
                AWS_ENDPOINT_URL=f"http://{s3.endpoint}")


def argv(url: str, out: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "nlq2sql.cli", "batch", "--evalset", "heldout", "--endpoint", url, "--model",
            MODEL, "--limit", str(N), "--shard-rows", str(ROWS), "--actors", "1", "--concurrency", "2",
            "--timeout", "30", "--out", out, "--json", *extra]


def on_bucket(fs: pafs.S3FileSystem, prefix: str) -> BatchOut:
    return BatchOut(f"s3://{BUCKET}/{prefix}", fs, f"{BUCKET}/{prefix}")


def shards_of(store: BatchOut) -> dict[str, list[str]]:
    return {name: [json.loads(t)["id"] for t in store.shard_lines(name)] for name in store.shards("parquet")}


def records(store: BatchOut) -> dict[str, dict[str, Any]]:
    recs = [json.loads(t) for name in store.shards("parquet") for t in store.shard_lines(name)]
    assert len(recs) == len({r["id"] for r in recs}) == N
    return {r["id"]: {k: v for k, v in r.items() if k not in TIMING} for r in recs}


def test_a_batch_on_a_bucket_killed_and_resumed_equals_a_local_one(s3: S3, env: dict[str, str],
                                                                   tmp_path: Path) -> None:
    with FakeServer(tmp_path / "fake", script(), model=MODEL, delay_s=0.5) as fake:
        local = subprocess.run(argv(fake.url, str(tmp_path / "local")), cwd=PROJECT_ROOT, env=env,
                               capture_output=True, text=True, timeout=300)
        assert local.returncode == 0, local.stderr[-3000:]
        ref = BatchOut.open(tmp_path / "local")

        uri, store = f"s3://{BUCKET}/run1", on_bucket(s3.fs, "run1")
        log = open(tmp_path / "killed.log", "w+")  # noqa: SIM115 -- closed below
        proc = subprocess.Popen(argv(fake.url, uri), cwd=PROJECT_ROOT, env=env, stdout=subprocess.DEVNULL,
                                stderr=log, start_new_session=True)
        try:
            deadline = time.monotonic() + 240
            while not store.shards("parquet"):  # a shard is in the bucket: kill the whole job
                assert proc.poll() is None, (tmp_path / "killed.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "no shard ever reached the bucket"
                time.sleep(0.02)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        kept = len(store.shards("parquet"))
        assert 1 <= kept < N // ROWS and store.state() == "run"  # resumable: a manifest, no summary
        resumed = subprocess.run(argv(fake.url, uri, "--resume"), cwd=PROJECT_ROOT, env=env, capture_output=True,
                                 text=True, timeout=300)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
    log.seek(0)
    messages = log.read() + resumed.stderr + resumed.stdout + local.stderr
    log.close()

    summary, ref_summary = json.loads(resumed.stdout), json.loads(local.stdout)
    assert shards_of(store) == shards_of(ref)  # the same items in the same shards, each once
    assert records(store) == records(ref)
    for key in FIGURES:
        assert summary[key] == ref_summary[key], key
    assert summary["resumed"] == {"sessions": 2, "shards_kept": summary["resumed"]["shards_kept"]}
    assert summary["resumed"]["shards_kept"] >= kept
    assert summary["throughput"]["items_this_session"] == N - ROWS * summary["resumed"]["shards_kept"]
    assert store.state() == "complete" and store.read_json("summary.json") == summary
    manifest = store.read_json("manifest.json")
    assert manifest["out"] == uri and len(manifest["sessions"]) == 1
    # Nothing temporary left; the secret in no object and no message.
    objects = s3.fs.get_file_info(pafs.FileSelector(f"{BUCKET}/run1", recursive=True))
    files = [i.path for i in objects if i.type == pafs.FileType.File]
    assert not [p for p in files if ".tmp-" in p], files
    assert sorted(p.rsplit("/", 1)[-1] for p in files if "/records/" not in p) == ["manifest.json", "summary.json"]
    for path in files:
        with s3.fs.open_input_stream(path) as fh:
            assert SECRET.encode() not in fh.read(), path
    assert SECRET not in messages and KEY_ID not in messages
    print(f"\nbatch on s3:// killed with {kept} of {N // ROWS} shards in the bucket; resumed: shards = local run")


@pytest.mark.parametrize("out", [f"s3://{KEY_ID}:{SECRET}@{BUCKET}/run2",
                                 f"s3://{BUCKET}/run2?region=us-east-1&secret_key={SECRET}"])
def test_credentials_in_the_uri_are_refused_without_echoing_them(out: str, s3: S3,
                                                                  tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["batch", "--evalset", "heldout", "--endpoint", "http://127.0.0.1:9/v1",
                                   "--out", out])
    assert res.exit_code == 2, res.output
    line = " ".join(res.output.split())
    assert "--out: credentials are not taken from the URI" in line and "AWS_SECRET_ACCESS_KEY" in line
    assert len(res.output.strip().splitlines()) == 1 and SECRET not in line
    assert s3.fs.get_file_info(f"{BUCKET}/run2").type == pafs.FileType.NotFound
    assert list(tmp_path.iterdir()) == []


def test_eval_refuses_object_storage_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """eval appends its records file per item (a bucket cannot): refused, not a local folder named 's3:'."""
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["eval", "--endpoint", "http://127.0.0.1:9/v1", "--out", f"s3://{BUCKET}/e"])
    assert res.exit_code == 2, res.output
    assert "--out: eval appends records.jsonl item by item" in " ".join(res.output.split())
    assert len(res.output.strip().splitlines()) == 1 and list(tmp_path.iterdir()) == []
