"""Bad inputs of issue 27, each reproduced here first (docs/bad-inputs.md lists them).

JSON nested ~1,000 deep (a 2 KB line) in every reader, a FIFO named by ``sql --intent @FILE``,
``db build --scale 1e12`` and ``--out`` over a user's file, an endpoint URL carrying a
password, unbounded ``--temperature`` / ``--max-tokens``, ``gate`` on records that are not
UTF-8, and ``matrix --prompts ""``.  Every one must end with exit 2, one message naming the
file and line (or the option), no traceback and nothing written.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from repo_paths import ROOT
from retail import RETAIL
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.errors import InputError, RecordError
from nlq2sql.inputs import MAX_JSON_DEPTH, check_json_depth, json_depth, json_object, option_text, parse_json
from nlq2sql.stages.evalset import EVALSET_DIR

HELDOUT = (EVALSET_DIR / "heldout.jsonl").read_text().splitlines()
IDS = [json.loads(x)["id"] for x in HELDOUT[:3]]
DEEP_ARRAY = "[" * 1000 + "]" * 1000  # ~2 KB: RecursionError in json.loads before the fix
DEEP_OBJECT = '{"a":' * 1000 + "1" + "}" * 1000
DEEP = {"array": DEEP_ARRAY, "object": DEEP_OBJECT}
SECRET = "s3cr3t-pw-27"
DEAD = "http://127.0.0.1:9/v1"  # refused before any request: every check here runs first


def run(*argv: str, env: dict[str, str | None] | None = None) -> tuple[int, str]:
    """(exit code, output on one line); never an exception other than SystemExit, no traceback."""
    res = CliRunner().invoke(app, list(argv), env=env)
    assert res.exception is None or isinstance(res.exception, SystemExit), (
        f"{type(res.exception).__name__}: {res.exception}")
    assert "Traceback" not in res.output, res.output
    return res.exit_code, " ".join(res.output.split())


def refused(*argv: str, expect: list[str], env: dict[str, str | None] | None = None) -> str:
    code, out = run(*argv, env=env)
    assert code == 2, out
    for piece in expect:
        assert piece in out, f"{piece!r} not in {out!r}"
    return out


@pytest.fixture(autouse=True)
def no_model_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing here may download a model or start a server (a bad input is refused first)."""
    from nlq2sql.run import models, server

    def work(*a: Any, **k: Any) -> Any:
        raise AssertionError("model work started for a bad input")

    monkeypatch.setattr(models, "pull", work)
    monkeypatch.setattr(server, "subprocess", SimpleNamespace(
        Popen=work, run=work, DEVNULL=subprocess.DEVNULL, STDOUT=subprocess.STDOUT, PIPE=subprocess.PIPE,
        TimeoutExpired=subprocess.TimeoutExpired))


@pytest.fixture(scope="module")
def scored_run(tmp_path_factory: pytest.TempPathFactory, small_warehouse: Path, cache_root: Path) -> Path:
    """A finished run, scored offline from gold-like responses (no server)."""
    root = tmp_path_factory.mktemp("scored")
    es = root / "es.jsonl"
    es.write_text("\n".join(HELDOUT[:3]) + "\n")
    resp = root / "resp.jsonl"
    resp.write_text("".join(json.dumps({"id": i, "text": json.dumps(json.loads(line)["gold"])}) + "\n"
                            for i, line in zip(IDS, HELDOUT, strict=False)))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NLQ2SQL_CACHE_DIR", str(cache_root))
        code, out = run("score", "--evalset", str(es), "--responses", str(resp), "--out", str(root / "run"))
    assert code == 0, out
    return root / "run"


@pytest.fixture
def run_copy(scored_run: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "run"
    shutil.copytree(scored_run, dest)
    return dest


def _snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


# -- 1. JSON nested 1,000 deep, in every reader -------------------------------------------

def test_depth_scan_matches_the_parser() -> None:
    for text, depth in (("1", 0), ("[]", 1), ('{"a": [1, {"b": "]]]\\\\"}]}', 3), ('"[[[["', 0),
                        ('["\\"[", ["\\\\"]]', 2), ("[" * 64 + "]" * 64, 64), (DEEP_ARRAY, 1000),
                        (DEEP_OBJECT, 1000)):
        assert json_depth(text) == depth, text[:40]
    check_json_depth("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, path="f", line=1)  # the limit passes
    with pytest.raises(InputError, match=r"^f:3: JSON nested more than 64 levels deep at column 65 "):
        check_json_depth("[" * 65 + "]" * 65, path="f", line=3)
    with pytest.raises(InputError, match=r"^f\.json:2: JSON nested more than 64 levels deep at column 69"):
        check_json_depth('{"x": "[[[[[",\n "y":' + DEEP_ARRAY + "}", path="f.json")  # a whole file: its line


@pytest.mark.parametrize("shape", DEEP)
def test_json_object_refuses_deep_lines(shape: str) -> None:
    with pytest.raises(InputError, match=r"^es\.jsonl:7: JSON nested more than 64 levels deep"):
        json_object(DEEP[shape], path="es.jsonl", line=7)


def test_huge_integer_is_malformed_json_not_a_traceback() -> None:
    # json.loads raises a plain ValueError (not JSONDecodeError) past 4,300 digits.
    with pytest.raises(InputError, match=r"^es\.jsonl:2: malformed JSON \(Exceeds the limit \(4300 digits\)"):
        json_object('{"id": ' + "1" * 5000 + "}", path="es.jsonl", line=2)
    with pytest.raises(RecordError, match="records.jsonl:1: malformed JSON"):
        parse_json("9" * 5000, path="records.jsonl", line=1, cls=RecordError)


@pytest.mark.parametrize("shape", DEEP)
def test_deep_evalset_line(shape: str, tmp_path: Path) -> None:
    es = tmp_path / "es.jsonl"
    es.write_text(HELDOUT[0] + "\n" + DEEP[shape] + "\n")
    refused("evalset", "check", str(es), expect=["es.jsonl:2:", "JSON nested more than 64 levels deep"])
    refused("eval", "--evalset", str(es), "--endpoint", DEAD, "--model", "m", "--out", str(tmp_path / "out"),
            expect=["es.jsonl:2:", "nested more than 64 levels"])
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("shape", DEEP)
def test_deep_responses_line(shape: str, tmp_path: Path) -> None:
    resp = tmp_path / "resp.jsonl"
    resp.write_text(json.dumps({"id": IDS[0], "text": "{}"}) + "\n" + DEEP[shape] + "\n")
    refused("score", "--evalset", "heldout", "--responses", str(resp), "--out", str(tmp_path / "out"),
            "--allow-missing", expect=["resp.jsonl:2:", "nested more than 64 levels"])
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("shape", DEEP)
def test_deep_question_line(shape: str, tmp_path: Path) -> None:
    from nlq2sql.answers.unscored import read_questions

    qs = tmp_path / "q.jsonl"
    qs.write_text(json.dumps({"id": "q1", "question": "revenue by region"}) + "\n" + DEEP[shape] + "\n")
    with pytest.raises(InputError, match=r"q\.jsonl:2: JSON nested more than 64 levels deep"):
        list(read_questions(qs))


@pytest.mark.parametrize("shape", DEEP)
def test_deep_training_line(shape: str, tmp_path: Path) -> None:
    train = tmp_path / "train.jsonl"
    train.write_text(DEEP[shape] + "\n")
    refused("guardrail", "train", "--train", str(train), "--out", str(tmp_path / "g.json"),
            expect=["train.jsonl:1:", "nested more than 64 levels"])
    assert not (tmp_path / "g.json").exists()


def _deepen_record(run: Path, line: int, shape: str = "array") -> None:
    path = run / "records.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines[line - 1] = DEEP[shape] + "\n"
    path.write_text("".join(lines))


@pytest.mark.parametrize("shape", DEEP)
def test_deep_record_in_gate_and_compare(shape: str, run_copy: Path, scored_run: Path, tmp_path: Path) -> None:
    keep = (run_copy / "records.jsonl").read_bytes()
    for line in (2, 3):  # a middle line and the last complete line: neither is a torn tail
        (run_copy / "records.jsonl").write_bytes(keep)
        _deepen_record(run_copy, line, shape)
        refused("gate", "--baseline", str(scored_run), "--candidate", str(run_copy),
                expect=[f"records.jsonl:{line}:", "nested more than 64 levels"])
        refused("compare", str(run_copy), "--out", str(tmp_path / "report"),
                expect=[f"records.jsonl:{line}:", "nested more than 64 levels"])
        assert not (tmp_path / "report").exists()


def test_deep_manifest_and_summary(run_copy: Path, scored_run: Path) -> None:
    for name in ("manifest.json", "summary.json"):
        keep = (run_copy / name).read_bytes()
        (run_copy / name).write_text('{\n  "kind": "score",\n  "x": ' + DEEP_OBJECT + "\n}\n")
        refused("gate", "--baseline", str(scored_run), "--candidate", str(run_copy),
                expect=[f"{name}:3:", "nested more than 64 levels"])
        (run_copy / name).write_bytes(keep)


def test_deep_record_on_resume_is_refused(run_copy: Path) -> None:
    from nlq2sql.records.store import repair_tail

    _deepen_record(run_copy, 3)
    with pytest.raises(RecordError, match=r"records\.jsonl:3: JSON nested more than 64"):
        repair_tail(run_copy / "records.jsonl")


@pytest.mark.parametrize("shape", DEEP)
def test_deep_view_records(shape: str, run_copy: Path, tmp_path: Path) -> None:
    """``view`` names the run's file and line, as ``gate`` and ``compare`` do (issue 37)."""
    keep = (run_copy / "records.jsonl").read_bytes()
    for line in (2, 3):  # a middle line and the last complete line
        (run_copy / "records.jsonl").write_bytes(keep)
        _deepen_record(run_copy, line, shape)
        refused("view", str(run_copy), "--out", str(tmp_path / "site"),
                expect=[f"{run_copy / 'records.jsonl'}:{line}:", "nested more than 64 levels"])
        assert not (tmp_path / "site").exists()


@pytest.mark.parametrize("shape", DEEP)
def test_deep_sql_intent(shape: str, tmp_path: Path) -> None:
    """``sql --intent`` decodes in nlq2sql/semantic (not ours to edit here): one line, exit 2,
    whichever of its own message or the CLI's RecursionError net words it."""
    refused("sql", "--intent", DEEP[shape], expect=["error:"])
    path = tmp_path / "intent.json"
    path.write_text(DEEP[shape])
    refused("sql", "--intent", f"@{path}", expect=["error:"])


def test_deep_model_output_is_invalid_json() -> None:
    from nlq2sql.errors import IntentError
    from nlq2sql.stages.intent import parse_intent

    with pytest.raises(IntentError) as info:
        parse_intent(DEEP_ARRAY, RETAIL)
    assert info.value.status == "invalid_json"


def test_deep_other_files(tmp_path: Path) -> None:
    from nlq2sql.load.capacity import load_model_config
    from nlq2sql.load.results import load_result
    from nlq2sql.records.rundir import RunDir
    from nlq2sql.stages.learned_guardrail import read_artefact
    from nlq2sql.transport.stream import decode_event

    deep = tmp_path / "deep.json"
    deep.write_text(DEEP_OBJECT)
    with pytest.raises(RecordError, match="deep.json:1: JSON nested more than 64"):
        load_result(deep)
    with pytest.raises(InputError, match="deep.json:1: JSON nested more than 64"):
        read_artefact(deep)
    with pytest.raises(InputError, match="deep.json:1: JSON nested more than 64"):
        load_model_config("m", deep, "auto")
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text("{}")
    (run / "summary.json").write_text(DEEP_OBJECT)
    with pytest.raises(RecordError, match="summary.json:1: JSON nested more than 64"):
        RunDir(run).summary()
    with pytest.raises(ValueError, match="nested too deeply"):  # a server's stream event: malformed, no crash
        decode_event(DEEP_ARRAY.encode())


# -- 2. sql --intent @FIFO ------------------------------------------------------------------

def test_option_text_refuses_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: opening it to read would block forever
    t0 = time.monotonic()
    with pytest.raises(InputError, match=r"fifo: cannot read --intent file: not a regular file"):
        option_text(f"@{fifo}", "--intent")
    assert time.monotonic() - t0 < 5
    with pytest.raises(InputError, match=r"^--intent: '@' must be followed by a file name"):
        option_text("@", "--intent")
    assert option_text('{"a": 1}', "--intent") == '{"a": 1}'


def _writer_for(fifo: Path, stop: threading.Event) -> threading.Thread:
    """Feeds ``{}`` to the FIFO once a reader opens it (never blocks: gives up when ``stop`` is
    set), so a command that wrongly opens the FIFO reads something instead of hanging the test."""
    def feed() -> None:
        while not stop.is_set():
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                    return
                time.sleep(0.02)
                continue
            os.write(fd, b"{}")
            os.close(fd)
            return

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    return thread


def test_sql_intent_fifo_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    stop = threading.Event()
    writer = _writer_for(fifo, stop)
    try:
        refused("sql", "--intent", f"@{fifo}", expect=["fifo", "not a regular file"])
    finally:
        stop.set()
        writer.join(5)


# -- 3. db build: --scale bounded, --out never overwritten without --force --------------------

def test_db_build_scale_too_large(tmp_path: Path) -> None:
    refused("db", "build", "--scale", "1e12", "--out", str(tmp_path / "w.duckdb"),
            expect=["--scale: must be at most 1,000, got 1e+12"])
    assert not (tmp_path / "w.duckdb").exists()


def test_db_build_refuses_an_existing_file_without_force(tmp_path: Path) -> None:
    mine = tmp_path / "mine.duckdb"
    mine.write_text("my own file\n")
    refused("db", "build", "--scale", "0.001", "--out", str(mine),
            expect=["mine.duckdb: field '--out': exists; pass --force to overwrite"])
    assert mine.read_text() == "my own file\n"
    refused("db", "build", "--scale", "0.001", "--out", str(tmp_path),
            expect=["field '--out': is a directory"])
    code, out = run("db", "build", "--scale", "0.001", "--out", str(mine), "--force")
    assert code == 0, out
    assert mine.read_bytes() != b"my own file\n"


# -- 4. credentials in an endpoint URL --------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["eval", "--model", "m"],
    ["sweep", "--model", "m", "--concurrency", "1", "--requests", "2"],
    ["load-check", "--model", "m", "--concurrency", "1,2"],
    ["probe", "health", "--model", "m"],
    ["capacity", "--model", "m"],
], ids=lambda a: a[0] if a[0] != "probe" else "probe-health")
def test_endpoint_with_credentials(argv: list[str], tmp_path: Path) -> None:
    for url in (f"http://user:{SECRET}@127.0.0.1:9/v1", f"https://{SECRET}@host.example/v1",
                f"http://user:{SECRET}@127.0.0.1:notaport/v1", f"ftp://u:{SECRET}@host/v1"):
        out = refused(*argv, "--endpoint", url, "--out", str(tmp_path / "out"),
                      expect=["--endpoint: the URL must not carry credentials", "--api-key-env"])
        assert SECRET not in out
        assert not (tmp_path / "out").exists()


def test_endpoints_file_with_credentials(tmp_path: Path) -> None:
    eps = tmp_path / "eps.txt"
    eps.write_text(f"http://127.0.0.1:9/v1\nhttp://admin:{SECRET}@127.0.0.1:10/v1\n")
    out = refused("eval", "--model", "m", "--endpoint", DEAD, "--endpoints-file", str(eps),
                  "--out", str(tmp_path / "out"), expect=["eps.txt:2: field 'url'", "must not carry credentials"])
    assert SECRET not in out


# -- 5. --temperature and --max-tokens bounded -----------------------------------------------

_BOUNDS = [
    ("--temperature", "1e6", "--temperature: must be between 0 and 2, got 1e+06"),
    ("--temperature", "2.5", "--temperature: must be between 0 and 2, got 2.5"),
    ("--temperature", "-0.1", "--temperature: must be between 0 and 2, got -0.1"),
    ("--max-tokens", "99999999999999999999", "--max-tokens: must be at most 1,000,000, got 99,999,999,999,999,999,999"),
    ("--max-tokens", "1000001", "--max-tokens: must be at most 1,000,000, got 1,000,001"),
]


@pytest.mark.parametrize(("command", "option", "value", "message"),
                         [(c, *b) for c in ("eval", "matrix", "sweep") for b in _BOUNDS
                          if not (c == "sweep" and b[0] == "--temperature")])  # sweep has no --temperature
def test_sampling_bounds(command: str, option: str, value: str, message: str, tmp_path: Path) -> None:
    extra = ["--concurrency", "1", "--requests", "2"] if command == "sweep" else []
    refused(command, "--endpoint", DEAD, "--model", "m", option, value, *extra, "--out", str(tmp_path / "out"),
            expect=[message])
    assert not (tmp_path / "out").exists()


def test_sampling_bounds_accept_the_edges() -> None:
    from dataclasses import replace

    from nlq2sql.run.config import MAX_TOKENS, EvalConfig, validate
    from nlq2sql.transport.client import Sampling

    for temperature, max_tokens in ((0.0, 1), (2.0, MAX_TOKENS)):
        validate(replace(EvalConfig(), sampling=Sampling(temperature=temperature, max_tokens=max_tokens)))


# -- 6. gate on records that are not UTF-8 ------------------------------------------------------

def test_gate_non_utf8_record_names_file_and_line(run_copy: Path, scored_run: Path) -> None:
    path = run_copy / "records.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    offset = len(lines[0]) + lines[1].index(b'"id"')
    lines[1] = lines[1].replace(b'"id"', b'"\xffd"', 1)
    path.write_bytes(b"".join(lines))
    before = _snapshot(run_copy)
    refused("gate", "--baseline", str(scored_run), "--candidate", str(run_copy),
            expect=[f"{path}:2: not UTF-8: byte 0xff at byte offset {offset + 1} of the file"])
    refused("compare", str(run_copy), "--out", str(run_copy.parent / "report"),
            expect=[f"{path}:2: not UTF-8: byte 0xff"])
    assert _snapshot(run_copy) == before


def test_gate_non_utf8_manifest_names_file_and_line(run_copy: Path, scored_run: Path) -> None:
    path = run_copy / "manifest.json"
    data = path.read_bytes()
    line = data.count(b"\n", 0, data.index(b'"kind"')) + 1
    path.write_bytes(data.replace(b'"kind"', b'"k\xe9ind"', 1))
    refused("gate", "--baseline", str(scored_run), "--candidate", str(run_copy),
            expect=[f"{path}:{line}: not UTF-8: byte 0xe9"])


# -- 7. matrix --prompts with an empty name ---------------------------------------------------

@pytest.mark.parametrize("prompts", ["", " ", ",", "baseline,,contrastive", "baseline,"])
def test_matrix_empty_prompt_name(prompts: str, tmp_path: Path) -> None:
    # No --endpoint: the check must come before a local server would be started (stubbed to fail).
    refused("matrix", "--prompts", prompts, "--out", str(tmp_path / "out"),
            expect=["--prompts: give comma-separated prompt names, none empty", repr(prompts)])
    assert not (tmp_path / "out").exists()


def test_matrix_unknown_prompt_refused_before_any_server(tmp_path: Path) -> None:
    refused("matrix", "--prompts", "baseline,nosuchprompt", "--out", str(tmp_path / "out"),
            expect=["no prompt 'nosuchprompt'"])


@pytest.mark.parametrize("kind", ["v1", "v2"])
def test_a_gold_limit_of_true_is_refused_not_read_as_one(kind: str, tmp_path: Path) -> None:
    """JSON ``true`` is not an integer: a gold ``"limit": true`` once became the limit 1."""
    if kind == "v1":
        gold = json.loads(HELDOUT[0])["gold"] | {"limit": True, "order": "desc", "intent": "top_n_by_metric"}
    else:
        gold = {"metrics": ["revenue"], "group_by": ["customer_id__region"],
                "order_by": [{"field": "revenue", "descending": True}], "limit": True}
    path = tmp_path / "limit.jsonl"
    path.write_text(json.dumps({"id": "x-1", "question": "q", "gold": gold}) + "\n")
    refused("evalset", "check", str(path), expect=[f"{path}:1", "gold", "limit"])


def test_semantic_init_out_a_directory_leaves_nothing(small_warehouse: Path, tmp_path: Path) -> None:
    """``--out DIR --force`` once left ``DIR.tmp`` behind after the move into a directory failed."""
    target = tmp_path / "models"
    target.mkdir()
    refused("semantic", "init", "--db", str(small_warehouse), "--out", str(target), "--force",
            expect=[str(target), "--out", "is a directory"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models"]
    assert not any(target.iterdir())


# -- 8. batch without the Ray extra (issue 37) --------------------------------------------------

_HIDE = "import sys\nfor _n in {names!r}:\n    sys.modules[_n] = None  # as if not installed: import fails\n"


@pytest.mark.parametrize("missing", [("pyarrow",), ("ray",), ("pyarrow", "ray")])
def test_batch_without_the_ray_extra_is_one_line_before_any_input(missing: tuple[str, ...], tmp_path: Path) -> None:
    """Every batch, good input or bad, is refused with the extra's name before anything is read."""
    import sys

    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(_HIDE.format(names=missing))
    env = {**os.environ, "PYTHONPATH": str(shim)}
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text("{not yaml")
    cases = [
        ["--evalset", "heldout", "--endpoint", DEAD],
        ["--evalset", str(tmp_path / "absent.jsonl"), "--endpoint", DEAD],
        ["--questions", str(tmp_path / "absent.jsonl"), "--endpoints-file", str(endpoints)],
        ["--evalset", "heldout", "--engine", "ray-vllm", "--out", str(tmp_path / "out")],
    ]
    for case in cases[:2] if len(missing) == 2 else cases:
        res = subprocess.run([sys.executable, "-m", "nlq2sql.cli", "batch", *case], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=120)
        out = res.stdout + res.stderr
        assert res.returncode == 2, out
        assert "Traceback" not in out, out
        lines = out.strip().splitlines()
        assert len(lines) == 1, out
        assert "is not installed: pip install 'nlq2sql[ray]'" in lines[0], out
        assert any(f"{name} is not installed" in lines[0] for name in missing), out
    assert not (tmp_path / "out").exists()


# -- 9. sql --intent: names the layer lacks, the v1 shape, rows on stdout (issue 37) -------------

@pytest.mark.parametrize(("query", "expect"), [
    ({"metrics": ["revenu"]}, ["unknown metric 'revenu'", "closest: revenue"]),
    ({"metrics": ["revenue"], "group_by": ["region"]}, ["unknown group-by 'region'", "closest: customer_id__region"]),
    ({"metrics": ["revenue"], "group_by": ["customer__region"]}, ["closest: customer_id__region"]),
    ({"metrics": ["revenue"], "group_by": ["metric_time__yr"]}, ["closest: metric_time__year"]),
    ({"metrics": ["revenue"], "where": [{"field": "segmnt", "op": "eq", "values": ["x"]}]},
     ["unknown filter field 'segmnt'", "customer_id__segment"]),
    ({"metrics": ["revenue"], "order_by": [{"field": "revnue"}]}, ["unknown order field 'revnue'", "revenue"]),
])
def test_sql_intent_unknown_names_suggest_the_layers(query: dict[str, Any], expect: list[str]) -> None:
    """Before: exit 1 and MetricFlow's raw text; now exit 2, one line, the layer's closest names."""
    out = refused("sql", "--intent", json.dumps(query), expect=["--intent", *expect])
    assert "query resolution" not in out


def test_sql_intent_names_every_unknown_group_by() -> None:
    refused("sql", "--intent", json.dumps({"metrics": ["revenue"], "group_by": ["region", "segmnt"]}),
            expect=["'region'", "'segmnt'", "customer_id__region", "customer_id__segment"])


@pytest.mark.parametrize("query", [{"metric": "revenue"}, {"metric": "revenue", "dimension": "region"}])
def test_sql_intent_v1_shape_without_intent_shows_the_v2_shape(query: dict[str, Any]) -> None:
    out = refused("sql", "--intent", json.dumps(query), expect=["'metrics' list", '{"metrics": ["revenue"]'])
    assert "'intent' is a required property" not in out


def test_closest_prefers_whole_parts_then_spelling() -> None:
    from nlq2sql.stages.semantic_tools import closest

    known = ["customer__region", "order__customer__region", "customer__segment", "revenue", "order__order_date__day"]
    assert closest("region", known) == ["customer__region", "order__customer__region"]
    assert closest("revnue", known) == ["revenue"]
    assert closest("order_date", known)[0] == "order__order_date__day"
    assert closest("zzz", known) == []


def test_sql_execute_writes_only_rows_to_stdout() -> None:
    """``sql --execute | jq`` works: JSON objects keyed by column (or CSV); the SQL only with --show-sql."""
    q = json.dumps({"metrics": ["revenue", "orders"], "group_by": ["customer_id__region"],
                    "order_by": [{"field": "customer_id__region"}]})
    res = CliRunner().invoke(app, ["sql", "--intent", q, "--execute"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in res.stdout.splitlines()]
    assert rows and all(list(r) == ["customer_id__region", "revenue", "orders"] for r in rows), rows
    assert [r["customer_id__region"] for r in rows] == sorted(r["customer_id__region"] for r in rows)
    assert "SELECT" not in res.output
    shown = CliRunner().invoke(app, ["sql", "--intent", q, "--execute", "--show-sql"])
    assert shown.stdout == res.stdout and "SELECT" in shown.stderr and "-- params: []" in shown.stderr
    csv = CliRunner().invoke(app, ["sql", "--intent", q, "--execute", "--format", "csv"])
    assert csv.exit_code == 0, csv.output
    lines = csv.stdout.splitlines()
    assert lines[0] == "customer_id__region,revenue,orders" and len(lines) == len(rows) + 1
    assert lines[1].split(",") == [str(v) for v in rows[0].values()]
    plain = CliRunner().invoke(app, ["sql", "--intent", q])
    assert plain.stdout.startswith("SELECT") and "-- params: []" in plain.stdout


def test_sql_format_is_checked() -> None:
    q = json.dumps({"metrics": ["revenue"]})
    refused("sql", "--intent", q, "--execute", "--format", "xml", expect=["--format", "unknown format 'xml'", "csv"])
    refused("sql", "--intent", q, "--format", "csv", expect=["--format", "with --execute"])


# -- 10. serving numbers checked up front (issue 37) ---------------------------------------------

@pytest.mark.parametrize(("argv", "message"), [
    (["serve", "--max-num-seqs", "0"], "--max-num-seqs: must be between 1 and 65,536, got 0"),
    (["serve", "--max-num-seqs", "-3"], "--max-num-seqs: must be between 1 and 65,536, got -3"),
    (["serve", "--max-num-seqs", "1000000"], "--max-num-seqs: must be between 1 and 65,536, got 1,000,000"),
    (["serve", "--replicas", "0"], "--replicas: must be between 1 and 64, got 0"),
    (["serve", "--gpus-per-replica", "0"], "--gpus-per-replica: must be between 1 and 64, got 0"),
    (["serve", "--gpus-per-replica", "65"], "--gpus-per-replica: must be between 1 and 64, got 65"),
    (["serve", "--max-model-len", "0"], "--max-model-len: must be between"),
    (["serve", "--startup-timeout", "0"], "--startup-timeout: must be more than 0"),
    (["sweep", "--max-num-seqs", "0"], "--max-num-seqs: must be between 1 and 65,536, got 0"),
    (["sweep", "--server-sweep", "max-num-seqs=4,0"], "--server-sweep: every value must be between 1 and 65,536"),
    (["sweep", "--server-sweep", "max-num-seqs=70000"], "--server-sweep: every value must be between 1 and 65,536"),
])
def test_serving_numbers_are_checked_before_any_model_work(argv: list[str], message: str, tmp_path: Path) -> None:
    """Before: ``serve --max-num-seqs 0`` went on to vLLM and exited 1 when it failed."""
    out = ["--out", str(tmp_path / "out")] if argv[0] == "sweep" else []
    refused(*argv, *out, expect=[message])
    assert not (tmp_path / "out").exists()


def test_serving_numbers_accept_the_edges() -> None:
    from nlq2sql.cli._serving import MAX_GPUS_PER_REPLICA, MAX_REPLICAS, check_server_numbers
    from nlq2sql.inputs import MAX_NUM_SEQS
    from nlq2sql.load.sweep import parse_server_sweep

    check_server_numbers(None, 1, None)
    check_server_numbers(1, MAX_REPLICAS, MAX_GPUS_PER_REPLICA)
    check_server_numbers(MAX_NUM_SEQS)
    assert parse_server_sweep(f"max-num-seqs=1,{MAX_NUM_SEQS}") == ("max_num_seqs", (1, MAX_NUM_SEQS))


# --- question files: every problem at once, with the suggestion that fixes it (issue 37) ---

V2_HELDOUT = [json.loads(x) for x in (EVALSET_DIR / "heldout-v2.jsonl").read_text().splitlines()]


def _jsonl(path: Path, objs: list[dict[str, object]]) -> str:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    return str(path)


def _lines_of(out: str, path: str) -> list[str]:
    """The ``line: field`` of each problem the report names, in order."""
    import re

    return re.findall(re.escape(path) + r":(\d+: field '[^']+')", out)


def test_evalset_check_reports_three_bad_v1_lines_at_once(tmp_path: Path) -> None:
    objs = [json.loads(x) for x in HELDOUT[:5]]
    objs[1]["question"] = 5
    objs[2]["gold"]["metric"] = "revenu"
    objs[3]["category"] = "pie chart!"
    path = _jsonl(tmp_path / "v1.jsonl", objs)
    out = refused("evalset", "check", path, expect=["3 problems:", "closest: 'revenue'"])
    assert _lines_of(out, path) == ["2: field 'question'", "3: field 'gold.metric'", "4: field 'category'"]


def test_evalset_check_reports_three_bad_v2_lines_at_once(tmp_path: Path) -> None:
    objs = [dict(o) for o in V2_HELDOUT[:5]]
    objs[1]["gold"] = {**objs[1]["gold"], "metrics": ["revenu"]}
    objs[2]["answerable"] = False  # a gold with answerable false
    objs[3]["gold"] = {**objs[3]["gold"], "where": [{"field": "customer_id__region", "op": "eq", "values": ["west"]}]}
    path = _jsonl(tmp_path / "v2.jsonl", objs)
    out = refused("evalset", "check", path, expect=["3 problems:", "unknown metric 'revenu' (closest: revenue",
                                                      "value 'west' is not a known customer_id__region",
                                                      "the data spells it 'West'"])
    assert _lines_of(out, path) == ["2: field 'gold'", "3: field '(line)'", "4: field 'gold'"]


def test_a_v2_set_under_the_default_answer_suggests_answer_query(tmp_path: Path) -> None:
    from nlq2sql.stages.evalset import load_evalset
    from nlq2sql.stages.queryset import load_query_set

    with pytest.raises(InputError) as exc:
        load_evalset(EVALSET_DIR / "heldout-v2.jsonl", RETAIL)
    assert "holds v2 golds" in str(exc.value) and "--answer query" in str(exc.value)
    assert "gold.intent" not in str(exc.value)
    v1_without_intent = {"id": "a", "question": "q", "gold": {"metric": "revenue", "dimension": "region"}}
    with pytest.raises(InputError) as exc2:  # the reverse: a v1-shaped gold read as a MetricFlow query
        load_query_set(_jsonl(tmp_path / "v1ish.jsonl", [v1_without_intent]), RETAIL)
    assert "looks like a v1 intent without its 'intent' key" in str(exc2.value)


def test_v2_category_is_derived_when_absent(tmp_path: Path) -> None:
    from nlq2sql.stages.queryset import load_query_set

    objs = [{k: v for k, v in o.items() if k != "category"} for o in V2_HELDOUT]
    unanswerable = {"id": "u1", "question": "profit?", "gold": None, "answerable": False}
    qs = load_query_set(_jsonl(tmp_path / "nocat.jsonl", [*objs, unanswerable]), RETAIL)
    derived = [c.category for c in qs.cases]
    assert derived[-1] == "unanswerable"
    assert derived[:-1] == [o["category"] for o in V2_HELDOUT]  # the shipped labels are the derived ones
