"""`nlq2sql view` without a browser: run loading, bad input, the bundle's files, the server's refusals.

The browser tests are in ``test_view.py``.  Here: every bad run directory is one message and
exit code 2; figures the viewer computes itself agree with the harness's own; the data
scripts cannot end a script or carry markup; the server binds 127.0.0.1, answers GET and
HEAD only, and serves nothing outside its page and the run directories it was given.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from repo_paths import ROOT
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.errors import InputError
from nlq2sql.stages.score import mcnemar_exact, rate
from nlq2sql.view import build_bundle, load_runs
from nlq2sql.view.bundle import ASSETS, CSP, js_string
from nlq2sql.view.headline import headline
from nlq2sql.view.runs import mcnemar_exact as view_mcnemar
from nlq2sql.view.server import HEADERS, ViewServer, make_server, safe_parts, serve_in_thread

FIXTURES = ROOT / "tests" / "fixtures" / "view-runs"  # frozen copies of committed runs (see test_view.py)
HELDOUT = FIXTURES / "heldout-smollm2-135m"
LOADCHECK = FIXTURES / "smollm2-135m" / "load-check"
QWEN_ADV = FIXTURES / "qwen2.5-coder-0.5b" / "matrix-adversarial"


def cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["view", *args])
    return res.exit_code, res.output


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


# ---------------------------------------------------------------- bad input: one message, exit 2

def _bad_cases(tmp: Path) -> dict[str, tuple[Path, str]]:
    file_arg = tmp / "a-file.txt"
    file_arg.write_text("x")
    empty = tmp / "empty"
    empty.mkdir()
    cases = {"missing path": (tmp / "nope", "no such directory"),
             "a file": (file_arg, "not a run directory"),
             "no manifest anywhere": (empty, "not a run directory")}

    def variant(name: str, change: str) -> Path:
        d = copy_run(HELDOUT, tmp / name)
        if change == "corrupt manifest":
            (d / "manifest.json").write_text("{not json")
        elif change == "manifest not an object":
            (d / "manifest.json").write_text("[1, 2]")
        elif change == "no records":
            (d / "records.jsonl").unlink()
        elif change == "malformed record":
            lines = (d / "records.jsonl").read_text().splitlines(keepends=True)
            lines[3] = "{oops\n"
            (d / "records.jsonl").write_text("".join(lines))
        elif change == "record without id":
            lines = (d / "records.jsonl").read_text().splitlines(keepends=True)
            rec = json.loads(lines[1])
            del rec["id"]
            lines[1] = json.dumps(rec) + "\n"
            (d / "records.jsonl").write_text("".join(lines))
        elif change == "record not an object":
            (d / "records.jsonl").write_text("[1]\n" + (HELDOUT / "records.jsonl").read_text())
        elif change == "corrupt summary":
            (d / "summary.json").write_text('{"n": ')
        return d

    expected = {"corrupt manifest": "manifest.json:1: malformed JSON",
                "manifest not an object": "manifest.json: not a JSON object",
                "no records": "records.jsonl: missing",
                "malformed record": "records.jsonl:4: malformed record",
                "record without id": "records.jsonl:2: field 'id'",
                "record not an object": "records.jsonl:1: record is not a JSON object",
                "corrupt summary": "summary.json:1: malformed JSON"}
    for name, msg in expected.items():
        cases[name] = (variant(name.replace(" ", "-"), name), msg)
    return cases


def test_bad_run_dirs_give_one_message_and_exit_2(tmp_path: Path) -> None:
    for name, (path, msg) in _bad_cases(tmp_path).items():
        code, out = cli(str(path))
        assert code == 2, (name, out)
        assert msg in out, (name, out)
        assert "Traceback" not in out and out.count("error:") == 1, (name, out)
        # the same with --out: nothing is written
        code, out = cli("--out", str(tmp_path / f"bundle-{name}"), str(path))
        assert code == 2 and not (tmp_path / f"bundle-{name}").exists(), (name, out)


def test_bad_options(tmp_path: Path) -> None:
    code, out = cli("--port", "70000", str(HELDOUT))
    assert code == 2 and "--port" in out
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    code, out = cli("--out", str(busy), str(HELDOUT))
    assert code == 2 and "--force" in out and (busy / "keep.txt").read_text() == "mine"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        code, out = cli("--port", str(s.getsockname()[1]), str(HELDOUT))
    assert code == 2 and "already in use" in out, out


def test_torn_last_line_is_skipped_and_summary_may_be_missing(tmp_path: Path) -> None:
    d = copy_run(HELDOUT, tmp_path / "run")
    (d / "summary.json").unlink()
    with open(d / "records.jsonl", "a") as fh:
        fh.write('{"id": "torn", "quest')
    (run,) = load_runs([d])
    assert run.n == 60 and run.cols["id"][-1] == "ho-060"
    assert any("summary.json missing" in n for n in run.notes)
    real = json.loads((HELDOUT / "summary.json").read_text())
    assert run.summary is not None
    for key in ("raw_accuracy", "final_accuracy", "execution_accuracy", "schema_valid_rate",
                "intervention_precision"):
        assert run.summary[key] == real[key], key
    lat = run.summary["timing"]["latency_s"]
    for q in ("p50", "p95", "p99", "mean"):
        assert lat[q] == pytest.approx(real["timing"]["latency_s"][q], rel=1e-9)


# ---------------------------------------------------------------- figures agree with the harness

def _page_wilson(k: int, n: int) -> dict[str, Any]:
    """The page's closed-form Wilson interval (``view.js``), here in Python."""
    if n == 0:
        return {"value": None, "k": 0, "n": 0, "ci95": None}
    z, p = 1.959963984540054, k / n
    denom = 1 + z ** 2 / n
    centre = (p + z ** 2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z ** 2 / (4 * n * n)) / denom
    return {"value": p, "k": k, "n": n, "ci95": [round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)]}


def test_wilson_and_mcnemar_agree_with_the_harness() -> None:
    for run in load_runs([HELDOUT, LOADCHECK, QWEN_ADV]):
        assert run.summary is not None
        mine = headline(run.cols).to_json()
        for key in ("raw_accuracy", "final_accuracy", "execution_accuracy", "schema_valid_rate",
                    "intervention_precision"):
            assert mine[key] == run.summary[key], (run.path, key)
    for k, n in ((0, 60), (3, 20), (2, 29), (59, 60), (60, 60), (17, 1000)):
        assert _page_wilson(k, n) == rate(k, n).to_json(), (k, n)
    for b, c in ((0, 0), (0, 5), (5, 0), (3, 4), (10, 2), (40, 61), (1000, 1100), (0, 30)):
        assert view_mcnemar(b, c) == pytest.approx(mcnemar_exact(b, c), rel=1e-9, abs=1e-300), (b, c)
    assert 0 < view_mcnemar(49_000, 51_000) < 1e-9  # stays finite for 100k discordant pairs


def test_paired_counts_are_the_items_that_flipped() -> None:
    runs = load_runs([QWEN_ADV])
    files = build_bundle(runs)
    meta = json.loads(json.loads(files["data/meta.js"].decode().split(",", 1)[1].rsplit(");", 1)[0]))
    (pair,) = meta["pairs"]
    a, b = ({r["id"]: r["correct_final"] for r in records(run.path)} for run in runs)
    assert (pair["b_count"], pair["c_count"]) == (sum(a[i] and not b[i] for i in a), sum(b[i] and not a[i] for i in a))
    assert (pair["b_count"], pair["c_count"]) == (0, 5)
    assert pair["p"] == pytest.approx(mcnemar_exact(0, 5))


def test_a_folder_of_runs_expands_in_natural_order() -> None:
    runs = load_runs([LOADCHECK])
    assert [r.path.name for r in runs] == ["c1-r0", "c16-r0", "c32-r0"]
    assert [r.manifest["concurrency"] for r in runs] == [1, 16, 32]
    assert len(load_runs([LOADCHECK, LOADCHECK / "c16-r0"])) == 3  # each run once


def run_tree(top: Path) -> Path:
    """Runs at several depths, with what a walk must not enter or must skip (see the asserts)."""
    copy_run(HELDOUT, top / "tpch-heldout" / "a-baseline-flat")
    copy_run(HELDOUT, top / "retail-heldout" / "a-baseline-flat")
    for c in (16, 1, 2):
        copy_run(LOADCHECK / "c1-r0", top / "deep" / "er" / "load-check" / f"c{c}-r0")
    copy_run(HELDOUT, top / "retail-heldout" / "a-baseline-flat" / "inner")  # inside a run: not entered
    copy_run(HELDOUT, top / ".hidden" / "run")  # a dot folder: not entered
    (copy_run(HELDOUT, top / "broken" / "bad-manifest") / "manifest.json").write_text("{oops")
    (copy_run(HELDOUT, top / "broken" / "no-records") / "records.jsonl").unlink()
    (top / "deep" / "loop").symlink_to(top, target_is_directory=True)  # a link loop: looked at, not entered
    (top / "latest").symlink_to(top / "tpch-heldout" / "a-baseline-flat")  # a linked run: found, once
    (top / "empty" / "folder").mkdir(parents=True)
    return top


def test_runs_are_found_at_any_depth_and_broken_ones_skipped(tmp_path: Path) -> None:
    top = run_tree(tmp_path / "top")
    runs = load_runs([top])
    assert [r.shown for r in runs] == [
        "top/deep/er/load-check/c1-r0", "top/deep/er/load-check/c2-r0", "top/deep/er/load-check/c16-r0",
        "top/retail-heldout/a-baseline-flat", "top/tpch-heldout/a-baseline-flat"]
    assert [r.key for r in runs] == list(range(5))
    assert runs.skipped == ["top/broken/bad-manifest: top/broken/bad-manifest/manifest.json:1: malformed JSON: "
                            "Expecting property name enclosed in double quotes",
                            "top/broken/no-records: top/broken/no-records/records.jsonl: missing (a run directory "
                            "holds manifest.json and records.jsonl)"]
    # the CLI goes on, says what it skipped, and the page lists it
    code, out = cli("--out", str(tmp_path / "site"), str(top))
    assert code == 0 and "wrote 5 runs" in out, out
    assert "note: skipped top/broken/bad-manifest: " in out and "note: skipped top/broken/no-records: " in out
    meta = (tmp_path / "site" / "data" / "meta.js").read_text()
    assert "top/broken/no-records: top/broken/no-records/records.jsonl: missing" in meta
    # a run named directly that cannot be read stays an error, as does a folder with nothing readable
    code, out = cli("--out", str(tmp_path / "site2"), str(top / "broken" / "bad-manifest"))
    assert code == 2 and "malformed JSON" in out
    code, out = cli("--out", str(tmp_path / "site3"), str(top / "broken"))
    assert code == 2 and "no run could be read" in out and not (tmp_path / "site3").exists()
    assert out.count("error:") == 1 and "note:" not in out  # one message, the reasons in it
    code, out = cli("--out", str(tmp_path / "site4"), str(top / "empty"))
    assert code == 2 and "no manifest.json here or in its sub-directories" in out
    if os.geteuid() != 0:  # root reads a folder whatever its mode
        locked = top / "locked"
        copy_run(HELDOUT, locked / "run")
        locked.chmod(0)
        try:
            assert any(n.startswith("top/locked: cannot list") for n in load_runs([top]).skipped)
        finally:
            locked.chmod(0o755)


def test_runs_are_named_so_they_can_be_told_apart(tmp_path: Path) -> None:
    top = run_tree(tmp_path / "top")
    m = json.loads((top / "tpch-heldout" / "a-baseline-flat" / "manifest.json").read_text())
    for key in ("prompt", "concurrency", "evalset"):
        del m[key]
    m["semantic_model"] = "tpch"
    (top / "tpch-heldout" / "a-baseline-flat" / "manifest.json").write_text(json.dumps(m))
    runs = load_runs([top])
    names = [r.name for r in runs]
    assert names == ["c1-r0", "c2-r0", "c16-r0", "retail-heldout/a-baseline-flat", "tpch-heldout/a-baseline-flat"]
    labels = [r.label for r in runs]
    assert len(set(labels)) == len(labels) and not any("?" in label for label in labels)
    assert labels[4] == "tpch-heldout/a-baseline-flat · smollm2-135m · ranking · tpch"  # what it lacks is left out
    assert labels[3] == "retail-heldout/a-baseline-flat · smollm2-135m · baseline + ranking · retail · c=8 · heldout"
    # runs of one warehouse do not repeat it
    assert load_runs([HELDOUT])[0].label == "heldout-smollm2-135m · smollm2-135m · baseline + ranking · c=8 · heldout"


def test_the_bundle_holds_no_path_of_the_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    top = run_tree(tmp_path / "top")
    single = copy_run(HELDOUT, tmp_path / "elsewhere" / "one-run")
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the runs are not below the working directory: given by absolute path
    out = tmp_path / "site"
    code, msg = cli("--out", str(out), str(top), str(single), str(top / "deep" / "er" / "load-check" / "c2-r0"))
    assert code == 0, msg
    forbidden = {str(tmp_path), str(tmp_path.resolve()), str(ROOT), os.path.expanduser("~") + "/"}
    forbidden |= {json.dumps(p)[1:-1] for p in forbidden}  # as written inside a JSON string
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) > 10
    for f in files:
        data = f.read_text()
        assert not [p for p in forbidden if p in data], f.name
    meta = json.loads(json.loads((out / "data" / "meta.js").read_text().split(",", 1)[1].rsplit(");", 1)[0]))
    assert [r["dir"] for r in meta["runs"]][-3:] == ["top/retail-heldout/a-baseline-flat",
                                                     "top/tpch-heldout/a-baseline-flat", "one-run"]
    # inside the working directory, a run is shown from there
    monkeypatch.chdir(tmp_path)
    assert [r.shown for r in load_runs([single, top / "deep"])][:2] == ["elsewhere/one-run",
                                                                        "top/deep/er/load-check/c1-r0"]


# ---------------------------------------------------------------- the bundle's files

EVIL = "</script><script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=1\">&amp;\u2028"


def test_data_scripts_cannot_carry_markup(tmp_path: Path) -> None:
    d = copy_run(HELDOUT, tmp_path / "evil")
    lines = (d / "records.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    rec["question"] = rec["raw_text"] = EVIL
    lines[0] = json.dumps(rec)
    (d / "records.jsonl").write_text("\n".join(lines) + "\n")
    files = build_bundle(load_runs([d]))
    for name, data in files.items():
        if name.startswith("data/"):
            assert b"<" not in data and b">" not in data and b"&" not in data, name
            assert data.isascii(), name
    assert json.loads(js_string(EVIL)) == EVIL
    # a record holding NaN (Python's json writes it) reaches the page as null: JSON.parse-able
    d2 = copy_run(HELDOUT, tmp_path / "nan")
    text = (d2 / "records.jsonl").read_text().replace('"latency_s":28.478207465000196', '"latency_s":NaN', 1)
    (d2 / "records.jsonl").write_text(text)
    (run,) = load_runs([d2])
    assert run.cols["latency_s"][0] is None and "NaN" not in run.lines[0]
    assert json.loads(run.lines[0])["latency_s"] is None


def test_page_loads_nothing_remote_and_has_no_inline_script() -> None:
    files = build_bundle(load_runs([HELDOUT]))
    page = files["index.html"].decode()
    assert f'content="{CSP}"' in page
    for directive in ("default-src 'none'", "script-src 'self'", "connect-src 'none'", "object-src 'none'",
                      "require-trusted-types-for 'script'"):
        assert directive in CSP
    assert "unsafe-inline" not in CSP and "unsafe-eval" not in CSP
    # every script is a file: no inline script body, no inline handler, nothing remote
    assert re.findall(r"<script[^>]*>([^<]*)</script>", page) == [""] * (len(ASSETS) - 1 + 1)  # the scripts + meta.js
    assert not re.search(r"\son\w+\s*=", page)
    for name in ["index.html"] + [f"assets/{a}" for a in ASSETS]:
        text = files[name].decode()
        urls = re.findall(r"(?:https?:)?//[\w.-]+\.[a-z]{2,}[^\s\"')]*", text)
        assert urls == ["http://www.w3.org/2000/svg"] * (name == "assets/view.js"), (name, urls)  # a namespace
        if name.endswith(".js"):
            assert ".innerHTML" not in text and "insertAdjacentHTML" not in text and "document.write" not in text
            assert "eval(" not in text and "new Function" not in text and "outerHTML" not in text


def test_write_bundle_replaces_atomically(tmp_path: Path) -> None:
    out = tmp_path / "site"
    code, msg = cli("--out", str(out), str(HELDOUT), str(LOADCHECK))
    assert code == 0, msg
    names = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert names == sorted(["index.html", "data/meta.js"] + [f"assets/{a}" for a in ASSETS]
                           + [f"data/r{k}-{part}.js" for k in range(4) for part in ("index", "text", "c0")])
    before = (out / "data" / "meta.js").read_bytes()
    code, msg = cli("--out", str(out), "--force", str(HELDOUT))
    assert code == 0, msg
    assert (out / "data" / "meta.js").read_bytes() != before and not (out / "data" / "r3-index.js").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["site"]  # no temporary left behind


# ---------------------------------------------------------------- the server

@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ViewServer, Path]]:
    tmp = tmp_path_factory.mktemp("view-server")
    run = copy_run(HELDOUT, tmp / "runs" / "one")
    secret = tmp / "secret.txt"
    secret.write_text("outside the run directory")
    (run / "escape.txt").symlink_to(secret)
    (run / "inside-link.json").symlink_to(run / "manifest.json")
    os.link(secret, run / "hard-link.txt")  # a second name for a file outside the run
    for name, body in HOSTILE_FILES.items():
        (run / name).write_bytes(body)
    srv = make_server(build_bundle(load_runs([run]), raw_files=True), [run], 0)
    serve_in_thread(srv)
    yield srv, run
    srv.shutdown()
    srv.server_close()


def request(srv: ViewServer, method: str, path: str, host: str | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    conn.putheader("Host", f"127.0.0.1:{srv.port}" if host is None else host)
    conn.endheaders()
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body


def test_server_binds_loopback_only(server: tuple[ViewServer, Path]) -> None:
    srv, _ = server
    assert srv.server_address[0] == "127.0.0.1"
    assert srv.socket.getsockname()[0] == "127.0.0.1"


def test_server_serves_its_page_and_run_files(server: tuple[ViewServer, Path]) -> None:
    srv, run = server
    status, headers, body = request(srv, "GET", "/")
    assert status == 200 and body.startswith(b"<!doctype html>")
    assert headers["content-security-policy"].startswith(CSP) and "frame-ancestors 'none'" in headers[
        "content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"
    status, headers, body = request(srv, "GET", "/data/meta.js")
    assert status == 200 and headers["content-type"].startswith("text/javascript")
    status, headers, body = request(srv, "GET", "/runs/0/records.jsonl")
    assert status == 200 and body == (run / "records.jsonl").read_bytes()
    assert headers["content-type"].startswith("text/plain")
    status, _, body = request(srv, "GET", "/runs/0/inside-link.json")  # a link that stays inside: fine
    assert status == 200 and body == (run / "manifest.json").read_bytes()
    status, headers, body = request(srv, "HEAD", "/runs/0/manifest.json")
    assert status == 200 and body == b"" and int(headers["content-length"]) == (run / "manifest.json").stat().st_size


HOSTILE_FILES = {
    "evil.js": b"window.__pwned = 1;",
    "evil.mjs": b"window.__pwned = 1;",
    "evil.html": b"<script>window.__pwned=1</script>",
    "evil.xhtml": b'<html xmlns="http://www.w3.org/1999/xhtml"><script src="evil.js"/></html>',
    "evil.xml": b'<?xml version="1.0"?><s xmlns="http://www.w3.org/1999/xhtml"><script>1</script></s>',
    "evil.svg": b'<svg xmlns="http://www.w3.org/2000/svg" onload="window.__pwned=1"/>',
    "plot.png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe",
}


def test_every_run_file_is_plain_text_in_a_sandbox(server: tuple[ViewServer, Path]) -> None:
    srv, run = server
    for name in [*HOSTILE_FILES, "records.jsonl", "manifest.json", "summary.json", "inside-link.json"]:
        for method in ("GET", "HEAD"):
            status, headers, body = request(srv, method, f"/runs/0/{name}")
            assert status == 200, (name, method)
            assert headers["content-type"] == "text/plain; charset=utf-8", (name, headers["content-type"])
            assert headers["content-security-policy"].startswith("sandbox;"), name
            assert "default-src 'none'" in headers["content-security-policy"], name
            assert headers["x-content-type-options"] == "nosniff", name
            for key in HEADERS:
                assert key.lower() in headers, (name, key)
            # text is shown; bytes that are not UTF-8 text are handed over as a download
            attach = headers.get("content-disposition", "")
            assert attach.startswith("attachment") == (name == "plot.png"), (name, attach)
            if method == "GET":
                assert body == (run / name).read_bytes()


def test_a_hard_link_is_refused(server: tuple[ViewServer, Path]) -> None:
    srv, run = server
    assert (run / "hard-link.txt").stat().st_nlink == 2
    status, _, body = request(srv, "GET", "/runs/0/hard-link.txt")
    assert status == 403 and b"outside the run directory" not in body


def raw_answer(srv: ViewServer, data: bytes) -> tuple[str, dict[str, str], bytes]:
    """Send ``data`` as it is on a fresh connection; the status line, headers and body back."""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(data)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    return status, {k.strip().lower(): v.strip() for k, v in (x.split(":", 1) for x in lines)}, body


def test_error_answers_carry_the_security_headers(server: tuple[ViewServer, Path]) -> None:
    srv, _ = server
    host = f"Host: 127.0.0.1:{srv.port}\r\n".encode()
    cases = {
        b"GARBAGE\r\n\r\n": 400,  # one word: no method and path
        b"GET / HTTP/9.x\r\n" + host + b"\r\n": 400,  # a bad version
        b"POST /\r\n\r\n": 400,  # an HTTP/0.9 request that is not GET
        b"GET / HTTP/1.1 extra words\r\n\r\n": 400,
        b"BREW / HTTP/1.1\r\n" + host + b"\r\n": 501,  # an unknown method
        b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n": 414,
        b"GET / HTTP/1.1\r\n" + host + b"".join(b"X-%d: 1\r\n" % i for i in range(120)) + b"\r\n": 431,
    }
    for data, code in cases.items():
        status, headers, body = raw_answer(srv, data)
        assert status.startswith(f"HTTP/1.0 {code} "), (data[:40], status)
        for key, value in HEADERS.items():
            assert headers.get(key.lower()) == value, (data[:40], key)
        assert headers["content-type"] == "text/plain; charset=utf-8", data[:40]
        assert b"<" not in body and b"GARBAGE" not in body and b"BREW" not in body, (data[:40], body)


def test_restart_on_the_same_port_right_after_a_stop() -> None:
    files = build_bundle(load_runs([HELDOUT]))
    first = make_server(files, [HELDOUT], 0)
    port = first.port
    serve_in_thread(first)
    try:
        # an answered request leaves the server's side of the connection in TIME_WAIT
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/", headers={"Host": f"127.0.0.1:{port}"})
        assert conn.getresponse().read().startswith(b"<!doctype html>")
        conn.close()
    finally:
        first.shutdown()
        first.server_close()
    second = make_server(files, [HELDOUT], port)  # at once, on the same port
    serve_in_thread(second)
    try:
        assert second.port == port
        # a port a live server listens on stays refused (SO_REUSEADDR on Linux allows that only
        # for a port without a listener; SO_REUSEPORT, which would share it, is not set)
        with pytest.raises(InputError, match="already in use"):
            make_server(files, [HELDOUT], port)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/", headers={"Host": f"127.0.0.1:{port}"})
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        second.shutdown()
        second.server_close()


TRAVERSALS = [
    "/../../etc/passwd", "/runs/0/../../secret.txt", "/runs/0/%2e%2e/%2e%2e/secret.txt",
    "/runs/0/%2E%2E%2F%2E%2E%2Fsecret.txt", "/runs/0/..%2f..%2fsecret.txt", "/data/..%2F..%2Fsecret.txt",
    "/assets/../../../etc/passwd", "//etc/passwd", "/runs/0//etc/passwd", "/runs/0/./manifest.json",
    "/runs/0/..\\..\\secret.txt", "/runs/0/%5c..%5csecret.txt", "/runs/0/%00", "/runs/0/%ff%fe",
]


def test_server_refuses_traversal(server: tuple[ViewServer, Path]) -> None:
    srv, run = server
    for path in TRAVERSALS:
        status, _, body = request(srv, "GET", path)
        # http.server itself folds a leading "//" into "/" before we see it: then nothing matches
        assert status == (404 if path == "//etc/passwd" else 403), (path, status)
        assert b"outside the run directory" not in body and b"root:" not in body
    for path in ("/runs/0/escape.txt", "/runs/0/" + str(run / ".." / ".." / "secret.txt").lstrip("/")):
        status, _, body = request(srv, "GET", path)
        assert status in (403, 404), (path, status)
        assert b"outside the run directory" not in body
    assert request(srv, "GET", "/runs/0/escape.txt")[0] == 403  # symlink out of the run: refused
    for path in ("http://127.0.0.1/etc/passwd", "/etc/passwd", "/runs/1/manifest.json", "/runs/x/manifest.json",
                 "/runs/0/nope.json", "/data/r9-index.js", "/assets/../index.html"):
        status, _, body = request(srv, "GET", path)
        assert status in (403, 404), (path, status)
        assert b"root:" not in body


def test_server_is_read_only_and_checks_host(server: tuple[ViewServer, Path]) -> None:
    srv, run = server
    before = sorted((p.name, p.stat().st_size) for p in run.iterdir())
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "PROPFIND", "MKCOL"):
        status, headers, _ = request(srv, method, "/runs/0/records.jsonl")
        assert status == 405 and headers["allow"] == "GET, HEAD", method
    status, _, _ = request(srv, "BREW", "/")
    assert status == 501
    assert sorted((p.name, p.stat().st_size) for p in run.iterdir()) == before
    for host in ("evil.example:80", f"evil.example:{srv.port}", "127.0.0.1", ""):
        assert request(srv, "GET", "/", host=host)[0] == 403, host
    assert request(srv, "GET", "/", host=f"localhost:{srv.port}")[0] == 200


def test_safe_parts() -> None:
    assert safe_parts("/") == []
    assert safe_parts("/runs/0/records.jsonl?x=1") == ["runs", "0", "records.jsonl"]
    assert safe_parts("/a%20b/") == ["a b"]
    for bad in TRAVERSALS[:12]:
        assert safe_parts(bad) is None, bad


def _listening(port: int) -> list[str]:
    """Local addresses listening on ``port`` (from /proc/net/tcp and tcp6)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            addr, p = cols[1].split(":")
            if int(p, 16) == port and cols[3] == "0A":  # LISTEN
                found.append(addr)
    return found


def test_cli_serves_on_loopback_and_stops_cleanly() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "nlq2sql.cli", "view", "--port", "0", str(HELDOUT)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert m, (line, proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        port = int(m.group(1))
        assert _listening(port) == ["0100007F"]  # 127.0.0.1, and nothing else
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/")
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            rc = proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    err = proc.stderr.read() if proc.stderr else ""
    assert rc == 0 and "Traceback" not in err, err


def test_cues_come_from_plain_rule_set_names_only() -> None:
    from nlq2sql.view.cues import CueExplainer

    ex = CueExplainer()
    iv = [{"rule": "false_ranking", "fields": ["intent"], "before": {}, "after": {}, "correct": False}]
    (info,) = ex.explain(["ranking"], "Revenue by region, first ten rows, descending", iv)
    assert info.ruleset == "ranking" and info.problem is None
    assert {c.cue: c.found for c in info.cues} == {"ranking": None, "row_count": 10, "sort_direction": "desc"}
    (info,) = ex.explain(["ranking"], "Top 3 regions by revenue", iv)
    assert dataclasses.asdict(info.cues[0]) == {"cue": "ranking", "role": "unless (must be absent)", "found": True}
    for names, says in ((["../../etc/passwd"], "not a plain name"), (["learned:x"], "trained classifier"),
                        (["nope"], "no guardrail rule set 'nope'"), ([], "none recorded")):
        (info,) = ex.explain(names, "q", iv)
        assert info.ruleset is None and info.problem is not None and says in info.problem, (names, info)
