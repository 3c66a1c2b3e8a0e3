"""Every command, fed generated bad arguments and files: a message, never a traceback.

The commands are enumerated from the typer app (sub-commands included), so a command or
option added later is fuzzed too.  For each one, hypothesis draws a subset of its options
with values chosen by the option's type: wrong types, negative and zero counts, ``nan`` /
``inf``, unknown names, conflicting flags, and paths into a fresh corpus of hostile files —
missing, a directory, a FIFO with no writer, a dangling link, empty, binary, non-UTF-8,
one huge line, a BOM, CRLF line ends, ``NaN`` in JSON, a run whose records no longer match
its summary, a folder that is not a run — next to valid ones.

Each run must end in one of:

- exit 2 with exactly one line on stderr (``error: …``) and the example's directory
  unchanged (no output directory, no partial file);
- exit 0 (the input was valid);
- the point where real work would start (a request loop, a model download, a local server,
  a warehouse build, a probe), stubbed here to raise :class:`ReachedWork` so the fuzz stays
  fast: the input passed every check.  (``compare``'s plots are stubbed too: rendering.)

Nothing may raise anything else, no output may contain "Traceback", and no example may run
past ``NLQ2SQL_FUZZ_HANG_S`` (default 120 s: a FIFO read, a count of 10^20 requests).  The examples are
derandomized (the same every run) and bounded: ``NLQ2SQL_FUZZ_EXAMPLES`` per command
(default 6); ``NLQ2SQL_FUZZ_STATS=path`` appends one line per command with its outcome
counts (the figures in docs/bad-inputs.md).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import types
import typing
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import typer
from fakeserver import FakeServer, free_port, script
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.errors import MAX_PROBLEMS
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.live import run_eval
from nlq2sql.stages.evalset import EVALSET_DIR

MODEL = "fake-model"
EXAMPLES = int(os.environ.get("NLQ2SQL_FUZZ_EXAMPLES", "6"))
HELDOUT = (EVALSET_DIR / "heldout.jsonl").read_text().splitlines()[:3]
IDS = [json.loads(x)["id"] for x in HELDOUT]


class ReachedWork(BaseException):  # noqa: N818 -- a sentinel, not an error
    """Raised where a command would start real work: its input passed every check."""


class Hung(BaseException):  # noqa: N818 -- escapes every handler, so the example fails
    """An example ran past ``HANG_S`` (a blocking read, an endless loop, a huge count)."""


HANG_S = float(os.environ.get("NLQ2SQL_FUZZ_HANG_S", "120"))


def _leaf_commands() -> list[tuple[tuple[str, ...], Any]]:
    out: list[tuple[tuple[str, ...], Any]] = []

    def walk(cmd: Any, path: tuple[str, ...]) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in sorted(subs.items()):
                walk(sub, (*path, name))
        else:
            out.append((path, cmd))

    walk(typer.main.get_command(app), ())
    return out


COMMANDS = _leaf_commands()

# -- the corpus: created afresh in every example's directory -----------------------------

def _tamper(run: Path) -> None:
    lines = (run / "records.jsonl").read_text().splitlines(keepends=True)
    rec = json.loads(lines[0])
    rec["correct_final"] = not rec.get("correct_final")
    (run / "records.jsonl").write_text(json.dumps(rec) + "\n" + "".join(lines[1:]))


def _tear(run: Path) -> None:
    data = (run / "records.jsonl").read_bytes()
    (run / "records.jsonl").write_bytes(data[: len(data) // 2])


BUILDERS: dict[str, Any] = {
    "missing": lambda p, run: None,
    "fresh_out": lambda p, run: None,
    "dir": lambda p, run: p.mkdir(),
    "fifo": lambda p, run: os.mkfifo(p),
    "dangling": lambda p, run: p.symlink_to(p.parent / "nowhere"),
    "empty": lambda p, run: p.write_bytes(b""),
    "binary": lambda p, run: p.write_bytes(bytes(range(256)) * 4),
    "nonutf8": lambda p, run: p.write_bytes(HELDOUT[0].replace("Sales", "Sal\xe9s").encode("latin-1") + b"\n"),
    "huge": lambda p, run: p.write_bytes(b"x" * (1 << 20) + b"\n"),
    "bom": lambda p, run: p.write_bytes(b"\xef\xbb\xbf" + "\n".join(HELDOUT).encode() + b"\n"),
    "crlf": lambda p, run: p.write_bytes("\r\n".join(HELDOUT).encode() + b"\r\n"),
    "nanjson": lambda p, run: p.write_text(json.dumps({"id": IDS[0]})[:-1] + ', "text": NaN, "question": NaN}\n'),
    "evalset": lambda p, run: p.write_text("\n".join(HELDOUT) + "\n"),
    "responses": lambda p, run: p.write_text("".join(json.dumps({"id": i, "text": "{}"}) + "\n" for i in IDS)),
    "run": lambda p, run: shutil.copytree(run, p),
    "run_tampered": lambda p, run: (shutil.copytree(run, p), _tamper(p)),
    "run_torn": lambda p, run: (shutil.copytree(run, p), _tear(p)),
    "notrun": lambda p, run: (p.mkdir(), (p / "notes.txt").write_text("not a run\n")),
    "afile": lambda p, run: p.exists() or p.write_text("a file\n"),
    "below_file": lambda p, run: p.parent.exists() or p.parent.write_text("a file\n"),  # afile/sub
    "notamodel": lambda p, run: (p.mkdir(), (p / "weights.bin").write_bytes(b"")),
    "config": lambda p, run: p.write_text(json.dumps({
        "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64, "num_key_value_heads": 2,
        "torch_dtype": "bfloat16"})),
}
PATH_KEYS = tuple(BUILDERS)


def make_corpus(root: Path, run: Path, keys: set[str]) -> dict[str, Path]:
    """The corpus entries an example names (only those: an example stays cheap)."""
    c = {k: root / k for k in PATH_KEYS}
    c["below_file"] = root / "afile" / "sub"
    for k in keys:
        if k in BUILDERS and not os.path.lexists(c[k]):
            BUILDERS[k](c[k], run)
    return c


def snapshot(root: Path) -> dict[str, Any]:
    """Every path below ``root`` with its kind and (regular files) bytes; FIFOs are never read."""
    snap: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            mode = p.lstat().st_mode
            key = str(p.relative_to(root))
            snap[key] = p.read_bytes() if stat.S_ISREG(mode) else stat.S_IFMT(mode)
    return snap


# -- values by option type ---------------------------------------------------------------

INTS = ("0", "-1", "-7", "1", "2", "3", "many", "1.5", "", "99999999999999999999", "nan", "0x10")
FLOATS = ("nan", "inf", "-inf", "NaN", "-5", "0", "0.5", "1", "1e309", "abc", "", "2.5")
WORDS = ("", " ", "0", "-1", "1,2", "1,x", "2,,4", "nan", "inf", "json", "none", "xml", "ranking",
         "nosuch", "a:b:c", "short,long", "x:-1:3", "max-num-seqs=1,2", "max-num-seqs=x", "sdk",
         "aiohttp", "batched", "auto", "fp8", "bfloat16", "x" * 300, "ünï\x00cødé", "--force")


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """(base type, is a list) of an option's annotation (``X | None``, ``list[X]``)."""
    is_list = False
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    if typing.get_origin(annotation) is list:
        is_list, annotation = True, typing.get_args(annotation)[0]
    return annotation, is_list


def _path_values() -> st.SearchStrategy[str]:
    return st.sampled_from(PATH_KEYS).map(lambda k: "@" + k)


def _str_values(name: str) -> st.SearchStrategy[str]:
    paths = _path_values()
    if name in ("evalset", "path"):
        return st.one_of(paths, st.sampled_from(("heldout", "nosuchset", "dev")))
    if name == "endpoint":
        return st.sampled_from(("@fake", "@fake_root", "@dead", "ftp://127.0.0.1:1/v1", "not-a-url",
                                "http://[::1", "http://127.0.0.1:notaport/v1", ""))
    if name == "model":
        return st.one_of(st.sampled_from((MODEL, "gpt-9", "smollm2-135m", "nosuch-model")), paths)
    if name in ("prompt", "prompts"):
        return st.one_of(st.sampled_from(("baseline", "nosuchprompt", "baseline,nosuch")), paths)
    if name == "api_key_env":
        return st.sampled_from(("NLQ2SQL_FUZZ_UNSET", "HOME", ""))
    if name in ("name",):
        return st.sampled_from(("smollm2-135m", "nosuch", "", "../x"))
    return st.one_of(st.sampled_from(WORDS), paths)


def _option_values(param: Any) -> st.SearchStrategy[list[str]] | None:
    """Argument words for one option (empty: left out), or None for a flag handled apart."""
    base, is_list = _unwrap(param.type_descriptor.annotation)
    if base is bool:
        return None
    if base is int:
        one: st.SearchStrategy[str] = st.sampled_from(INTS)
    elif base is float:
        one = st.sampled_from(FLOATS)
    elif base is Path:
        one = _path_values()
    else:
        one = _str_values(param.name)
    many = st.lists(one, min_size=1, max_size=3) if is_list else one.map(lambda v: [v])
    if param.param_type_name == "argument":
        return many if param.required else st.one_of(st.just([]), many)
    opt = max(param.opts, key=len)
    with_opt = many.map(lambda vs: [w for v in vs for w in (opt, v)])
    return with_opt if param.required else st.one_of(st.just([]), with_opt)


def _flag_values(param: Any) -> st.SearchStrategy[list[str]]:
    words = [[], [param.opts[0]]] + ([[param.secondary_opts[0]]] if param.secondary_opts else [])
    return st.sampled_from(words)


#: A valid value for each option name that has one, so that a drawn bad value is met alone
#: (with every option bad at once, the first check would end every example).
VALID = {"endpoint": ["@fake"], "model": [MODEL], "evalset": ["@evalset"], "out": ["@fresh_out"],
         "limit": ["2"], "responses": ["@responses"], "run_dirs": ["@run", "@run"], "path": ["@evalset"],
         "name": ["smollm2-135m"], "model_config": ["@config"], "run": ["@run"], "requests": ["4"],
         "warmup": ["0"], "concurrency": None, "runs": None}


def _valid_words(p: Any) -> list[str]:
    values = VALID.get(p.name)
    if not values:
        return []
    if p.param_type_name == "argument":
        return list(values)
    return [w for v in values for w in (max(p.opts, key=len), v)]


def argv_strategy(path: tuple[str, ...], cmd: Any) -> st.SearchStrategy[list[str]]:
    """The command with valid values where known, then 0-4 options drawn and given bad (or
    any) values, the rest left at their defaults."""
    params = [p for p in cmd.params if getattr(p, "type_descriptor", None) is not None]
    drawn = {p.name: _option_values(p) for p in params}
    drawn = {p.name: _flag_values(p) if drawn[p.name] is None else drawn[p.name] for p in params}

    def build(picks: list[int]) -> st.SearchStrategy[list[str]]:
        chosen = [params[i] for i in picks]
        base = [w for p in params if p not in chosen for w in _valid_words(p)]
        return st.tuples(*(drawn[p.name] for p in chosen)).map(
            lambda ws: [*path, *base, *(w for words in ws for w in words)])

    picks = st.lists(st.integers(0, len(params) - 1), max_size=min(4, len(params)), unique=True) \
        if params else st.just([])
    return picks.flatmap(build)


# -- fixtures ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeServer]:
    with FakeServer(tmp_path_factory.mktemp("fuzzfake"), script(), model=MODEL) as f:
        yield f


@pytest.fixture(scope="module")
def finished_run(fake: FakeServer, tmp_path_factory: pytest.TempPathFactory, small_warehouse: Path,
                 cache_root: Path) -> Path:
    out = tmp_path_factory.mktemp("fuzzrun") / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NLQ2SQL_CACHE_DIR", str(cache_root))
        run_eval(EvalConfig(evalset="heldout", out=out, endpoint=fake.url, model=MODEL, limit=3,
                            concurrency=2))
    return out


@pytest.fixture
def stubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Real work (requests, model downloads, servers, warehouse builds) stops at its door."""
    from nlq2sql.experiments import compare
    from nlq2sql.load import probes
    from nlq2sql.run import live, models, server
    from nlq2sql.semantic import warehouse

    def work(*a: Any, **k: Any) -> Any:
        raise ReachedWork

    monkeypatch.setattr(live, "_run", work)  # the request loop of every run
    monkeypatch.setattr(models, "pull", work)  # model download and conversion
    monkeypatch.setattr(warehouse, "build", work)  # `db build`
    monkeypatch.setattr(probes.ProbeMode, "measure", work)  # a probe's own requests
    monkeypatch.setattr(compare, "plots", lambda runs: {})  # rendering, not input handling: slow
    for module, name in (("nlq2sql.view.server", "make_server"),  # `view` without --out: serves
                         ("nlq2sql.stages.learned_guardrail", "train")):  # `guardrail train`: fits a model
        with contextlib.suppress(ImportError, AttributeError):
            monkeypatch.setattr(importlib.import_module(module), name, work)
    monkeypatch.setattr(server, "subprocess", SimpleNamespace(  # no server process, ever
        Popen=work, run=work, DEVNULL=subprocess.DEVNULL, STDOUT=subprocess.STDOUT, PIPE=subprocess.PIPE,
        TimeoutExpired=subprocess.TimeoutExpired))
    monkeypatch.delenv("NLQ2SQL_FUZZ_UNSET", raising=False)


def _resolve(argv: list[str], corpus: dict[str, Path], fake: FakeServer, dead: int) -> list[str]:
    special = {"@fake": fake.url, "@fake_root": fake.base_url, "@dead": f"http://127.0.0.1:{dead}/v1"}
    return [special.get(a) or (str(corpus[a[1:]]) if a.startswith("@") and a[1:] in corpus else a)
            for a in argv]


def check_outcome(result: Any, args: list[str], root: Path, before: dict[str, Any], *,
                  one_line: bool = True) -> None:
    """Exit 0, or exit 2 with one ``error: …`` line on stderr (``one_line=False``: a report of
    several problems may list them, its ``error:`` line first or last) and ``root`` unchanged;
    never another exception, another exit code or a traceback."""
    shown = f"nlq2sql {' '.join(args)}\n--- output ---\n{result.output}"
    assert "Traceback" not in result.output, shown
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}\n{shown}")
    assert result.exit_code in (0, 2), f"exit {result.exit_code}\n{shown}"
    if result.exit_code == 2:
        lines = [x for x in result.stderr.splitlines() if x.strip()]
        many = re.fullmatch(r"error: (\d+) problems:", lines[0]) if lines else None
        if one_line and many is not None:  # a file's problems, all at once: the count, then one line each
            listed = [x for x in lines[1:] if not x.startswith(("note:", "... and "))]
            assert len(listed) == min(int(many.group(1)), MAX_PROBLEMS), shown
        elif one_line:
            assert len(lines) == 1 and lines[0].startswith("error:"), shown
        else:
            assert lines and (lines[0].startswith("error:") or lines[-1].startswith("error:")), shown
        assert snapshot(root) == before, f"exit 2 but files changed\n{shown}"


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_command_refuses_bad_input_in_one_line(path: tuple[str, ...], cmd: Any, fake: FakeServer,
                                                     finished_run: Path, stubbed: None,
                                                     tmp_path: Path) -> None:
    dead = free_port()
    outcomes: Counter[str] = Counter()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(argv_strategy(path, cmd))
    def one(argv: list[str]) -> None:
        root = Path(tempfile.mkdtemp(dir=tmp_path))
        cwd = os.getcwd()
        os.chdir(root)  # defaults relative to the working directory (runs/…, report) land here too
        try:
            corpus = make_corpus(root, finished_run, {a[1:] for a in argv if a.startswith("@")})
            args = _resolve(argv, corpus, fake, dead)
            before = snapshot(root)

            def hung(*_: Any) -> None:
                raise Hung(f"nlq2sql {' '.join(args)}: still running after {HANG_S:g} s")

            previous = signal.signal(signal.SIGALRM, hung)
            signal.setitimer(signal.ITIMER_REAL, HANG_S)
            try:
                result = CliRunner().invoke(app, args)
            except ReachedWork:  # a BaseException: the runner lets it through
                outcomes["reached work"] += 1
                return
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
                for s, h in handlers.items():  # `serve` installs its own
                    signal.signal(s, h)
            check_outcome(result, args, root, before)
            outcomes[f"exit {result.exit_code}"] += 1
        finally:
            os.chdir(cwd)
            shutil.rmtree(root, ignore_errors=True)

    one()
    print(f"\n{' '.join(path)}: {dict(outcomes)}")
    if os.environ.get("NLQ2SQL_FUZZ_STATS"):
        with open(os.environ["NLQ2SQL_FUZZ_STATS"], "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"command": " ".join(path), **outcomes}) + "\n")


def test_all_commands_enumerated() -> None:
    names = {" ".join(p) for p, _ in COMMANDS}
    assert {"eval", "score", "compare", "load-check", "sweep", "capacity", "db build", "evalset check",
            "probe cancel", "models pull", "serve"} <= names, names


# -- the readers of a user's JSONL, fed hostile lines (tests/strategies.py: hostile_files) ----
#
# Eval set, responses, question and intent files made of valid lines and lines nested past any
# bound, with NaN / 5,000-digit numbers / lone surrogates for a field, cut short, or with bytes
# that are not UTF-8.  Each reader must accept the file (exit 0) or refuse it naming the file
# (exit 2, nothing written); never a traceback, never exit 1.

HOSTILE_EXAMPLES = int(os.environ.get("NLQ2SQL_FUZZ_HOSTILE_EXAMPLES", "12"))
_GOLDS = [json.loads(x)["gold"] for x in HELDOUT]
READER_LINES = {
    "evalset": HELDOUT,
    "responses": [json.dumps({"id": i, "text": json.dumps(g), "finish_reason": "stop"}) for i, g in zip(IDS, _GOLDS,
                                                                                                       strict=True)],
    "questions": [json.dumps({"id": i, "question": json.loads(x)["question"]}) for i, x in zip(IDS, HELDOUT,
                                                                                                 strict=True)],
    "intent": [json.dumps(g) for g in _GOLDS],
}


def _reader_argv(reader: str, path: Path, root: Path) -> list[str]:
    if reader == "evalset":
        return ["evalset", "check", str(path)]
    if reader == "responses":
        return ["score", "--evalset", str(root / "es.jsonl"), "--responses", str(path), "--out", str(root / "out"),
                "--allow-missing"]
    return ["sql", "--intent", f"@{path}"]


@pytest.mark.parametrize("reader", sorted(READER_LINES))
def test_readers_refuse_hostile_lines(reader: str, stubbed: None, tmp_path: Path) -> None:
    from hypothesis import example
    from strategies import hostile_files

    from nlq2sql.answers.unscored import read_questions
    from nlq2sql.errors import InputError

    outcomes: Counter[str] = Counter()

    @settings(max_examples=HOSTILE_EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(hostile_files(READER_LINES[reader]))
    @example(READER_LINES[reader][0].encode() + b"\n" + b"[" * 1000 + b"]" * 1000 + b"\n")  # issue 27
    def one(data: bytes) -> None:
        root = Path(tempfile.mkdtemp(dir=tmp_path))
        try:
            (root / "es.jsonl").write_text("\n".join(HELDOUT) + "\n")
            path = root / "input.jsonl"
            path.write_bytes(data)
            if reader == "questions":  # `batch --questions` needs an endpoint and Ray: the reader itself
                try:
                    list(read_questions(path))
                except InputError as exc:
                    assert str(exc).startswith(str(path)), str(exc)
                    outcomes["refused"] += 1
                else:
                    outcomes["read"] += 1
                return
            args = _reader_argv(reader, path, root)
            before = snapshot(root)
            result = CliRunner().invoke(app, args)
            check_outcome(result, args, root, before, one_line=reader != "evalset")
            if result.exit_code == 2 and reader != "intent":  # `sql --intent` names the option instead
                assert str(path) in " ".join(result.stderr.split()), result.stderr
            outcomes[f"exit {result.exit_code}"] += 1
        finally:
            shutil.rmtree(root, ignore_errors=True)

    one()
    print(f"\n{reader}: {dict(outcomes)}")

