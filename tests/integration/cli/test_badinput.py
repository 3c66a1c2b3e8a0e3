"""The bad-input catalogue (listed in docs/bad-inputs.md).

Each case runs one CLI command and must end with exit code 2, one clear message naming
what is wrong and where (``file:line: field 'x'`` when there is a file), no traceback, and
no partial artifact: the output directory is absent afterwards, or — when it existed
before — byte-for-byte unchanged.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fakeserver import FakeServer, free_port, script
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.live import run_eval
from nlq2sql.stages.evalset import EVALSET_DIR

MODEL = "fake-model"
KEY_ENV = "NLQ2SQL_BADINPUT_KEY"
HELDOUT = (EVALSET_DIR / "heldout.jsonl").read_text().splitlines()
GOOD = [json.loads(x) for x in HELDOUT[:3]]


@dataclass
class Ctx:
    tmp: Path
    fake: FakeServer
    keyed: FakeServer
    run: Path  # an existing, finished run directory (for resume / overwrite cases)

    @property
    def out(self) -> Path:
        return self.tmp / "out" / "run"

    def eval(self, *args: str, endpoint: str | None = None, model: str = MODEL) -> list[str]:
        base = ["eval", "--evalset", "heldout", "--endpoint", endpoint or self.fake.url,
                "--model", model, "--limit", "2", "--out", str(self.out)]
        return base + list(args)

    def evalset(self, lines: list[Any], name: str = "es.jsonl") -> Path:
        path = self.tmp / name
        path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
        return path

    def with_line2(self, change: Callable[[dict[str, Any]], Any]) -> Path:
        """An eval set whose second line is a changed copy of a good one."""
        bad = json.loads(json.dumps(GOOD[1]))
        result = change(bad)
        return self.evalset([GOOD[0], bad if result is None else result, GOOD[2]])

    def responses(self, lines: list[Any]) -> Path:
        path = self.tmp / "resp.jsonl"
        path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
        return path

    def score(self, responses: Path) -> list[str]:
        return ["score", "--evalset", "heldout", "--responses", str(responses), "--out", str(self.out)]

    def file(self, name: str, text: str) -> Path:
        path = self.tmp / name
        path.write_text(text)
        return path

    def raw(self, name: str, data: bytes) -> Path:
        path = self.tmp / name
        path.write_bytes(data)
        return path

    def fifo(self, name: str = "fifo") -> Path:
        path = self.tmp / name
        os.mkfifo(path)  # no writer: opening it to read would block forever
        return path

    def link(self, name: str, target: str) -> Path:
        path = self.tmp / name
        path.symlink_to(self.tmp / target)
        return path

    def dir(self, name: str, *files: str) -> Path:
        path = self.tmp / name
        path.mkdir()
        for f in files:
            (path / f).write_text("x\n")
        return path


@dataclass
class Case:
    id: str
    what: str  # for the docs
    build: Callable[[Ctx], list[str]]
    expect: Callable[[Ctx], list[str]]
    env: dict[str, str | None] = field(default_factory=dict)
    existing_run: bool = False  # the command targets ctx.run (must stay unchanged)


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        target = obj
        *path, last = key.split(".")
        for k in path:
            target = target[int(k)] if isinstance(target, list) else target[k]
        if value is _DELETE:
            del target[last]
        else:
            target[last] = value
    return change


_DELETE = object()
ES = "es.jsonl"


def _non_utf8(line: str) -> bytes:
    """A good eval set line with one Latin-1 byte (é = 0xe9) in its question."""
    obj = json.loads(line)
    obj["question"] = obj["question"].replace("by", "by ré", 1)
    return json.dumps(obj, ensure_ascii=False).encode("latin-1")


def _tampered_records(ctx: Ctx) -> list[str]:
    """A record changed after the summary was written (still valid JSON)."""
    path = ctx.run / "records.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    rec = json.loads(lines[0])
    rec["correct_final"] = not rec["correct_final"]
    path.write_text(json.dumps(rec) + "\n" + "".join(lines[1:]))
    return ["compare", str(ctx.run), "--out", str(ctx.out)]


def _dropped_record(ctx: Ctx) -> list[str]:
    path = ctx.run / "records.jsonl"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-1]))
    return ["compare", str(ctx.run), "--out", str(ctx.out)]


def _not_a_run_resume(ctx: Ctx) -> list[str]:
    folder = ctx.dir("notarun", "notes.txt")
    return [str(folder) if a == str(ctx.out) else a for a in ctx.eval("--resume")]


DEEP = "[" * 1000 + "]" * 1000  # ~2 KB, nested past Python's recursion limit


def _candidate(ctx: Ctx, change: Callable[[list[bytes]], None]) -> list[str]:
    """gate: the existing run as baseline, a changed copy of it as candidate."""
    cand = ctx.tmp / "candidate"
    shutil.copytree(ctx.run, cand)
    lines = (cand / "records.jsonl").read_bytes().splitlines(keepends=True)
    change(lines)
    (cand / "records.jsonl").write_bytes(b"".join(lines))
    return ["gate", "--baseline", str(ctx.run), "--candidate", str(cand)]


def _non_utf8_record(lines: list[bytes]) -> None:
    lines[1] = lines[1].replace(b'"id"', b'"\xffd"', 1)


def _deep_record(lines: list[bytes]) -> None:
    lines[1] = DEEP.encode() + b"\n"


def _malformed_records(ctx: Ctx) -> list[str]:
    path = ctx.run / "records.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + '{"id": "ho-002", "bro\n' + "".join(lines[1:]))
    return ctx.eval("--resume")


CASES: list[Case] = [
    # ---- eval sets ------------------------------------------------------------------
    Case("evalset-malformed-json", "eval set line is not JSON",
         lambda c: c.eval("--evalset", str(c.evalset([GOOD[0], '{"id": "x", ']))),
         lambda c: [f"{ES}:2:", "malformed JSON"]),
    Case("evalset-empty-line", "eval set has an empty line",
         lambda c: c.eval("--evalset", str(c.evalset([GOOD[0], "", GOOD[1]]))),
         lambda c: [f"{ES}:2:", "empty line"]),
    Case("evalset-empty-file", "eval set file is empty",
         lambda c: c.eval("--evalset", str(c.file(ES, ""))),
         lambda c: [ES, "eval set is empty"]),
    Case("evalset-wrong-type", "question is a number",
         lambda c: c.eval("--evalset", str(c.with_line2(_set("question", 42)))),
         lambda c: [f"{ES}:2: field 'question'", "string"]),
    Case("evalset-unknown-enum", "gold metric not in the enum",
         lambda c: c.eval("--evalset", str(c.with_line2(_set("gold.metric", "profit")))),
         lambda c: [f"{ES}:2: field 'gold.metric'", "revenue"]),
    Case("evalset-bad-category", "category is not a short label",
         lambda c: c.eval("--evalset", str(c.with_line2(_set("category", "pie chart!")))),
         lambda c: [f"{ES}:2: field 'category'", "category 'pie chart!' must be a short label"]),
    Case("evalset-duplicate-id", "two items share an id",
         lambda c: c.eval("--evalset", str(c.evalset([GOOD[0], GOOD[1], GOOD[0]]))),
         lambda c: [f"{ES}:3: field 'id'", "duplicate id 'ho-001' (first on line 1)"]),
    Case("evalset-missing-field", "gold intent missing",
         lambda c: c.eval("--evalset", str(c.with_line2(_set("gold", _DELETE)))),
         lambda c: [f"{ES}:2: field 'gold'", "required"]),
    Case("evalset-extra-field", "unknown key on an item",
         lambda c: c.eval("--evalset", str(c.with_line2(_set("colour", "red")))),
         lambda c: [f"{ES}:2: field 'colour'", "not permitted"]),
    Case("evalset-unknown-filter-value", "gold filter value not in the warehouse",
         lambda c: c.eval("--evalset", str(c.with_line2(_set("gold.filters", [
             {"field": "region", "op": "eq", "value": "Atlantis"}])))),
         lambda c: [f"{ES}:2: field 'gold.filters.0.value'", "'Atlantis' is not a known region"]),
    Case("evalset-inconsistent-gold", "time_series gold without a time grain",
         lambda c: c.eval("--evalset", str(c.with_line2(lambda o: {**o, "gold": {
             **o["gold"], "intent": "time_series", "time_grain": None, "dimension": None,
             "limit": None, "order": None}}))),
         lambda c: [f"{ES}:2: field 'gold'", "time_series needs a time_grain"]),
    Case("evalset-not-object", "a line is a JSON array",
         lambda c: c.eval("--evalset", str(c.evalset([GOOD[0], [1, 2]]))),
         lambda c: [f"{ES}:2:", "must be a JSON object"]),
    Case("evalset-unknown-name", "no shipped set of that name",
         lambda c: c.eval("--evalset", "nosuchset"),
         lambda c: ["no eval set named 'nosuchset'", "heldout"]),
    Case("evalset-missing-file", "eval set path does not exist",
         lambda c: c.eval("--evalset", str(c.tmp / "missing.jsonl")),
         lambda c: ["missing.jsonl", "cannot read: No such file or directory"]),
    Case("evalset-non-utf8", "a byte that is not UTF-8 in a question (never replaced)",
         lambda c: c.eval("--evalset", str(c.raw(ES, HELDOUT[0].encode() + b"\n" + _non_utf8(HELDOUT[1])
                                                 + b"\n"))),
         lambda c: [f"{ES}:2:", "not UTF-8: byte 0xe9 at byte offset"]),
    Case("evalset-check-non-utf8", "`evalset check` on the same file",
         lambda c: ["evalset", "check", str(c.raw(ES, _non_utf8(HELDOUT[0]) + b"\n"))],
         lambda c: [f"{ES}:1:", "not UTF-8: byte 0xe9 at byte offset"]),
    Case("evalset-dangling-symlink", "eval set is a symbolic link to nothing",
         lambda c: c.eval("--evalset", str(c.link("es-link", "gone.jsonl"))),
         lambda c: ["es-link", "dangling symbolic link"]),
    Case("evalset-fifo", "eval set is a FIFO (no writer: a read would block)",
         lambda c: c.eval("--evalset", str(c.fifo("es-fifo"))),
         lambda c: ["es-fifo", "not a regular file"]),
    Case("evalset-directory", "eval set path is a directory",
         lambda c: c.eval("--evalset", str(c.dir("es-dir"))),
         lambda c: ["es-dir", "a directory, not a file"]),
    Case("evalset-deep-json", "a line nested 1,000 deep (~2 KB of brackets)",
         lambda c: c.eval("--evalset", str(c.evalset([GOOD[0], DEEP]))),
         lambda c: [f"{ES}:2:", "JSON nested more than 64 levels deep at column 65"]),
    Case("evalset-huge-integer", "a number of 5,000 digits (past Python's int-parsing limit)",
         lambda c: c.eval("--evalset", str(c.evalset([GOOD[0], '{"id": ' + "1" * 5000 + "}"]))),
         lambda c: [f"{ES}:2:", "malformed JSON (Exceeds the limit (4300 digits)"]),
    # ---- responses (offline scoring) -------------------------------------------------
    Case("responses-malformed-json", "responses line is not JSON",
         lambda c: c.score(c.responses([{"id": "ho-001", "text": "{}"}, '{"id": "ho-002", "te'])),
         lambda c: ["resp.jsonl:2:", "malformed JSON"]),
    Case("responses-empty-line", "responses file has an empty line",
         lambda c: c.score(c.responses([{"id": "ho-001", "text": "{}"}, ""])),
         lambda c: ["resp.jsonl:2:", "empty line"]),
    Case("responses-duplicate-id", "an id answered twice",
         lambda c: c.score(c.responses([{"id": "ho-001", "text": "{}"}, {"id": "ho-001", "text": "{}"}])),
         lambda c: ["resp.jsonl:2: field 'id'", "duplicate id 'ho-001'"]),
    Case("responses-unknown-id", "an id not in the eval set",
         lambda c: c.score(c.responses([{"id": "zz-999", "text": "{}"}])),
         lambda c: ["resp.jsonl:1: field 'id'", "unknown id 'zz-999'"]),
    Case("responses-wrong-type", "text is a number",
         lambda c: c.score(c.responses([{"id": "ho-001", "text": 7}])),
         lambda c: ["resp.jsonl:1: field 'text'", "must be a string or null"]),
    Case("responses-missing-id", "a line without an id",
         lambda c: c.score(c.responses([{"text": "{}"}])),
         lambda c: ["resp.jsonl:1: field 'id'", "missing or non-string id"]),
    Case("responses-not-object", "a line is a JSON string",
         lambda c: c.score(c.responses(['"just text"'])),
         lambda c: ["resp.jsonl:1:", "must be a JSON object"]),
    Case("responses-missing-file", "responses path does not exist",
         lambda c: c.score(c.tmp / "nope.jsonl"),
         lambda c: ["nope.jsonl", "cannot read responses"]),
    Case("responses-non-utf8", "responses line with a byte that is not UTF-8",
         lambda c: c.score(c.raw("resp.jsonl", b'{"id": "ho-001", "text": "{}"}\n{"id": "ho-002", "text": "\xff"}\n')),
         lambda c: ["resp.jsonl:2:", "not UTF-8: byte 0xff at byte offset 57"]),
    Case("responses-fifo", "responses path is a FIFO with no writer",
         lambda c: c.score(c.fifo()),
         lambda c: ["fifo", "cannot read responses: not a regular file"]),
    Case("responses-directory", "responses path is a directory",
         lambda c: c.score(c.dir("resp-dir")),
         lambda c: ["resp-dir", "cannot read responses: a directory, not a file"]),
    Case("responses-empty-file", "responses file is empty (every item missing)",
         lambda c: c.score(c.file("resp.jsonl", "")),
         lambda c: ["resp.jsonl", "eval set items have no response (first: ho-001, ho-002",
                    "pass --allow-missing"]),
    Case("responses-partial", "responses cover 5 items of the eval set",
         lambda c: c.score(c.responses([{"id": f"ho-00{i}", "text": "{}"} for i in range(1, 6)])),
         lambda c: ["resp.jsonl", "items have no response (first: ho-006, ho-007"]),
    Case("responses-deep-json", "a responses line nested 1,000 deep",
         lambda c: c.score(c.responses([{"id": "ho-001", "text": "{}"}, '{"a":' * 1000 + "1" + "}" * 1000])),
         lambda c: ["resp.jsonl:2:", "JSON nested more than 64 levels deep at column 321"]),
    Case("responses-no-text", "a line whose text key is misspelt (txt)",
         lambda c: c.score(c.responses([{"id": "ho-001", "txt": "{}"}])),
         lambda c: ["resp.jsonl:1: field 'text'", "missing field 'text'", "found 'txt'"]),
    Case("responses-other-kind", "v2 query answers scored as v1 intents (the default --answer)",
         lambda c: c.score(c.responses([{"id": "ho-001", "text": '{"metrics": ["revenue"], "group_by": []}'}])),
         lambda c: ["resp.jsonl:1: field 'text'", "is a v2 query", "pass --answer query"]),
    Case("responses-other-kind-v2", "v1 intent answers scored as v2 queries (--answer query)",
         lambda c: [*c.score(c.responses([{"id": "ho-001", "text": '{"intent": "total", "metric": "revenue"}'}])),
                    "--answer", "query"],
         lambda c: ["resp.jsonl:1: field 'text'", "is a v1 intent", "pass --answer intent"]),
    Case("responses-out-is-file", "score --out names a file",
         lambda c: c.score(c.file("resp.jsonl", ""))[:-1] + [str(c.file("afile", "")), "--allow-missing"],
         lambda c: ["afile", "exists and is not a directory"]),
    # ---- prompts ---------------------------------------------------------------------
    Case("prompt-empty-file", "prompt file is empty",
         lambda c: c.eval("--prompt", str(c.file("empty.txt", "  \n"))),
         lambda c: ["empty.txt", "prompt file is empty"]),
    Case("prompt-unknown-name", "no shipped prompt of that name",
         lambda c: c.eval("--prompt", "nosuchprompt"),
         lambda c: ["no prompt 'nosuchprompt'", "baseline"]),
    Case("prompt-directory", "--prompt names a directory",
         lambda c: c.eval("--prompt", str(c.dir("prompts-dir"))),
         lambda c: ["prompts-dir", "cannot read prompt: a directory, not a file"]),
    Case("prompt-non-utf8", "prompt file with a byte that is not UTF-8",
         lambda c: c.eval("--prompt", str(c.raw("p.txt", b"Answer with JSON.\nCaf\xe9\n"))),
         lambda c: ["p.txt:2:", "not UTF-8: byte 0xe9 at byte offset 21"]),
    # ---- guardrails ------------------------------------------------------------------
    Case("guardrail-unknown-name", "no rule set of that name",
         lambda c: c.eval("--guardrails", "nosuchrules"),
         lambda c: ["no guardrail rule set 'nosuchrules'", "ranking"]),
    Case("guardrail-malformed-toml", "rule set is not TOML",
         lambda c: c.eval("--guardrails", str(c.file("bad.toml", 'name = "x"\n[[rules]\nid = 1\n'))),
         lambda c: ["bad.toml", "invalid TOML", "line 2"]),
    Case("guardrail-unknown-field", "rule changes a field intents do not have",
         lambda c: c.eval("--guardrails", str(c.file("bad.toml", (
             'name = "x"\n[[rules]]\nid = "r"\nfield = "colour"\nfrom = ["a"]\nto = "b"\n')))),
         lambda c: ["bad.toml: field 'rules[0].field'", "unknown intent field 'colour'"]),
    Case("guardrail-missing-key", "rule without its target value",
         lambda c: c.eval("--guardrails", str(c.file("bad.toml", (
             'name = "x"\n[[rules]]\nid = "r"\nfield = "intent"\nfrom = ["breakdown"]\n')))),
         lambda c: ["bad.toml: field 'rules[0].to'", "missing key"]),
    Case("guardrail-non-utf8", "rule set with a byte that is not UTF-8",
         lambda c: c.eval("--guardrails", str(c.raw("bad.toml", b'name = "caf\xe9"\n'))),
         lambda c: ["bad.toml:1:", "not UTF-8: byte 0xe9"]),
    Case("guardrail-unknown-cue", "rule refers to a cue that is not defined",
         lambda c: c.eval("--guardrails", str(c.file("bad.toml", (
             'name = "x"\n[[rules]]\nid = "r"\nfield = "intent"\nfrom = ["breakdown"]\n'
             'to = "time_series"\nwhen = "nosuchcue"\n')))),
         lambda c: ["bad.toml: field 'rules[0]", "unknown cue 'nosuchcue'"]),
    # ---- CLI options -----------------------------------------------------------------
    Case("option-concurrency-zero", "--concurrency 0",
         lambda c: c.eval("--concurrency", "0"),
         lambda c: ["--concurrency: must be at least 1, got 0"]),
    Case("option-negative-limit", "--limit -3",
         lambda c: c.eval("--limit", "-3"),
         lambda c: ["--limit: must be at least 1, got -3"]),
    Case("option-max-tokens-zero", "--max-tokens 0",
         lambda c: c.eval("--max-tokens", "0"),
         lambda c: ["--max-tokens: must be at least 1, got 0"]),
    Case("option-timeout-zero", "--timeout 0",
         lambda c: c.eval("--timeout", "0"),
         lambda c: ["--timeout: must be positive"]),
    Case("option-timeout-nan", "--timeout nan",
         lambda c: c.eval("--timeout", "nan"),
         lambda c: ["--timeout: must be a finite number, got nan"]),
    Case("option-timeout-inf", "--timeout inf",
         lambda c: c.eval("--timeout", "inf"),
         lambda c: ["--timeout: must be a finite number, got inf"]),
    Case("option-failure-rate-nan", "--max-failure-rate nan (every float option: one check)",
         lambda c: c.eval("--max-failure-rate", "nan"),
         lambda c: ["--max-failure-rate: must be a finite number, got nan"]),
    Case("option-rate-nan", "sweep --rate 0.5,nan (comma-separated numbers too)",
         lambda c: ["sweep", "--endpoint", c.fake.url, "--model", MODEL, "--rate", "0.5,nan", "--out", str(c.out)],
         lambda c: ["--rate: must be a finite number, got 'nan'"]),
    Case("option-requests-huge", "sweep --requests 99999999999999999999 (would never finish expanding)",
         lambda c: ["sweep", "--endpoint", c.fake.url, "--model", MODEL, "--requests", "99999999999999999999",
                    "--out", str(c.out)],
         lambda c: ["--requests: must be at most 1,000,000, got 99,999,999,999,999,999,999"]),
    Case("option-resume-and-force", "--resume with --force (conflicting)",
         lambda c: c.eval("--resume", "--force"),
         lambda c: ["--force: --resume continues the run in --out and --force replaces it"]),
    Case("option-unknown-structured-mode", "--structured xml",
         lambda c: c.eval("--structured", "xml"),
         lambda c: ["--structured: unknown mode 'xml'", "response_format"]),
    Case("option-failure-rate-out-of-range", "--max-failure-rate 1.5",
         lambda c: c.eval("--max-failure-rate", "1.5"),
         lambda c: ["--max-failure-rate: must be between 0 and 1, got 1.5"]),
    Case("option-not-an-integer", "--concurrency many",
         lambda c: c.eval("--concurrency", "many"),
         lambda c: ["Invalid value for '--concurrency'", "valid integer"]),
    Case("option-misspelt", "--concurency (typo)",
         lambda c: c.eval("--concurency", "4"),
         lambda c: ["No such option", "--concurency"]),
    Case("option-db-scale-zero", "db build --scale 0",
         lambda c: ["db", "build", "--out", str(c.out / "w.duckdb"), "--scale", "0"],
         lambda c: ["--scale: must be positive, got 0.0"]),
    Case("option-db-scale-huge", "db build --scale 1e12 (would fail allocating memory, after a long wait)",
         lambda c: ["db", "build", "--out", str(c.out / "w.duckdb"), "--scale", "1e12"],
         lambda c: ["--scale: must be at most 1,000, got 1e+12"]),
    Case("db-build-out-exists", "db build --out names an existing file, without --force",
         lambda c: ["db", "build", "--scale", "0.001", "--out", str(c.file("mine.duckdb", "my data\n"))],
         lambda c: ["mine.duckdb: field '--out': exists; pass --force to overwrite"]),
    Case("option-temperature-huge", "--temperature 1e6",
         lambda c: c.eval("--temperature", "1e6"),
         lambda c: ["--temperature: must be between 0 and 2, got 1e+06"]),
    Case("option-max-tokens-huge", "--max-tokens 99999999999999999999",
         lambda c: c.eval("--max-tokens", "99999999999999999999"),
         lambda c: ["--max-tokens: must be at most 1,000,000, got 99,999,999,999,999,999,999"]),
    Case("option-matrix-empty-prompt", "matrix --prompts '' (no prompt name)",
         lambda c: ["matrix", "--endpoint", c.fake.url, "--model", MODEL, "--prompts", "", "--out", str(c.out)],
         lambda c: ["--prompts: give comma-separated prompt names, none empty, got ''"]),
    # ---- endpoint, model, key, output directory --------------------------------------
    Case("env-api-key-env-unset", "--api-key-env names an unset variable",
         lambda c: c.eval("--api-key-env", "NLQ2SQL_NO_SUCH_KEY"),
         lambda c: ["--api-key-env: environment variable NLQ2SQL_NO_SUCH_KEY is not set"],
         env={"NLQ2SQL_NO_SUCH_KEY": None}),
    Case("env-api-key-missing-hosted", "hosted endpoint needs a key, none given",
         lambda c: c.eval(endpoint=c.keyed.url),
         lambda c: ["--api-key-env:", f"{c.keyed.url} refused the API key (HTTP 401)"],
         env={"OPENAI_API_KEY": None}),
    Case("env-api-key-wrong", "hosted endpoint refuses the key given",
         lambda c: c.eval("--api-key-env", "NLQ2SQL_WRONG_KEY", endpoint=c.keyed.url),
         lambda c: ["--api-key-env:", "refused the API key (HTTP 401)"],
         env={"NLQ2SQL_WRONG_KEY": "sk-wrong"}),
    Case("endpoint-unreachable", "nothing listens at the endpoint",
         lambda c: c.eval(endpoint=f"http://127.0.0.1:{free_port()}/v1"),
         lambda c: ["--endpoint:", "is unreachable", "Cannot connect"]),
    Case("endpoint-not-a-url", "--endpoint is not a URL",
         lambda c: c.eval(endpoint="not-a-url"),
         lambda c: ["--endpoint:", "not-a-url"]),
    Case("endpoint-not-http", "--endpoint is an ftp:// URL",
         lambda c: c.eval(endpoint="ftp://127.0.0.1/v1"),
         lambda c: ["--endpoint:", "'ftp://127.0.0.1/v1' is not an http(s) URL (scheme ftp://"]),
    Case("sweep-unreachable-endpoint", "sweep against nothing: refused, no --out left behind",
         lambda c: ["sweep", "--endpoint", f"http://127.0.0.1:{free_port()}/v1", "--model", MODEL,
                    "--concurrency", "1", "--requests", "2", "--out", str(c.out)],
         lambda c: ["--endpoint:", "is unreachable"]),
    Case("endpoint-credentials", "--endpoint http://user:PASSWORD@host/v1 (the password is never shown)",
         lambda c: c.eval(endpoint=f"http://user:s3cret-pw@127.0.0.1:{c.fake.port}/v1"),
         lambda c: ["--endpoint: the URL must not carry credentials", "--api-key-env"]),
    Case("endpoint-not-openai", "endpoint URL without /v1 (no model list there)",
         lambda c: c.eval(endpoint=c.fake.base_url),
         lambda c: ["--endpoint:", f"{c.fake.base_url}/models did not return JSON"]),
    Case("model-not-served", "wrong model name; the message lists the served ones",
         lambda c: c.eval(model="gpt-9"),
         lambda c: ["--model:", "model 'gpt-9' is not served by", "served: fake-model"]),
    Case("model-folder-not-a-model", "eval with a local model folder lacking config.json",
         lambda c: ["eval", "--evalset", "heldout", "--model", str(c.tmp / "notamodel"),
                    "--out", str(c.out)],
         lambda c: ["notamodel is not a model folder (no config.json)"]),
    Case("model-path-missing", "eval with a local model path that does not exist",
         lambda c: ["eval", "--evalset", "heldout", "--model", str(c.tmp / "nomodel"),
                    "--out", str(c.out)],
         lambda c: ["nomodel does not exist"]),
    Case("output-dir-unwritable", "--out below a regular file",
         lambda c: c.eval()[:-2] + ["--out", str(c.file("afile", "") / "run")],
         lambda c: ["afile/run", "output directory is not writable"]),
    Case("output-dir-exists", "--out is an existing run, neither --resume nor --force",
         lambda c: c.eval(),
         lambda c: [str(c.run), "output directory exists; pass --resume to continue it or --force"],
         existing_run=True),
    Case("resume-nothing", "--resume where there is no run",
         lambda c: c.eval("--resume"),
         lambda c: ["nothing to resume: no run here"]),
    Case("resume-not-a-run", "--resume on a folder that holds files but no run",
         _not_a_run_resume,
         lambda c: ["notarun: cannot resume: not a run directory (no manifest.json"]),
    Case("resume-different-prompt", "--resume with another prompt than the run's",
         lambda c: c.eval("--resume", "--prompt", "contrastive"),
         lambda c: ["manifest.json", "cannot resume: the run differs (prompt_sha256"],
         existing_run=True),
    Case("resume-different-evalset", "--resume with another eval set than the run's",
         lambda c: c.eval("--resume", "--evalset", "dev"),
         lambda c: ["cannot resume: the run differs", "evalset_sha256"],
         existing_run=True),
    Case("resume-malformed-record", "--resume over a records file with a broken middle line",
         _malformed_records,
         lambda c: ["records.jsonl:2:", "malformed record"],
         existing_run=True),
    # ---- recorded runs (compare, load-check) --------------------------------------------
    Case("compare-out-is-file", "compare RUN --out FILE",
         lambda c: ["compare", str(c.run), "--out", str(c.file("afile", ""))],
         lambda c: ["--out:", "afile exists and is not a directory"]),
    Case("compare-run-is-file", "compare A_FILE",
         lambda c: ["compare", str(c.file("afile", "")), "--out", str(c.out)],
         lambda c: ["afile", "not a run directory (a run directory holds manifest.json and records.jsonl)"]),
    Case("compare-not-a-run", "compare a folder that is not a run",
         lambda c: ["compare", str(c.dir("notarun", "notes.txt")), "--out", str(c.out)],
         lambda c: ["notarun", "not a run directory: no manifest.json"]),
    Case("compare-records-changed", "compare a run whose records changed after its summary",
         _tampered_records,
         lambda c: ["records.jsonl", "changed after its summary was written"]),
    Case("compare-records-missing-line", "compare a run that lost a record",
         _dropped_record,
         lambda c: ["records.jsonl", "readable records, but the summary was computed from"]),
    Case("gate-record-non-utf8", "gate on a candidate whose records have a byte that is not UTF-8",
         lambda c: _candidate(c, _non_utf8_record),
         lambda c: ["candidate/records.jsonl:2: not UTF-8: byte 0xff at byte offset"]),
    Case("gate-record-deep-json", "gate on a candidate with a record nested 1,000 deep",
         lambda c: _candidate(c, _deep_record),
         lambda c: ["candidate/records.jsonl:2: JSON nested more than 64 levels deep"]),
    Case("load-check-one-run", "load-check --runs with a single run",
         lambda c: ["load-check", "--runs", str(c.run), "--out", str(c.out)],
         lambda c: ["--runs: needs at least 2 runs to compare, got 1"]),
    Case("load-check-one-level", "load-check --concurrency 1 (one run: nothing to compare)",
         lambda c: ["load-check", "--endpoint", c.fake.url, "--model", MODEL, "--concurrency", "1",
                    "--out", str(c.out)],
         lambda c: ["needs at least 2 runs to compare"]),
    Case("serve-port-in-use", "serve on a port something already listens on",
         lambda c: ["serve", "--port", str(c.tmp.joinpath("port").read_text())],
         lambda c: [f"--port: port {c.tmp.joinpath('port').read_text()} is already in use"]),
    Case("serve-port-out-of-range", "serve --port 70000",
         lambda c: ["serve", "--port", "70000"],
         lambda c: ["--port: must be between 1 and 65535, got 70000"]),
    Case("serve-model-not-a-model", "serve a folder that is not a model",
         lambda c: ["serve", "--port", str(free_port()), "--model", str(c.tmp / "notamodel")],
         lambda c: ["notamodel is not a model folder (no config.json)"]),
]


def _point_existing(case: Case, argv: list[str], ctx: Ctx) -> list[str]:
    """Cases on an existing run target ctx.run instead of the fresh output path."""
    if case.existing_run and str(ctx.out) in argv:
        argv = [str(ctx.run) if a == str(ctx.out) else a for a in argv]
    return argv


def _snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeServer, FakeServer]]:
    root = tmp_path_factory.mktemp("fakes")
    with FakeServer(root, script(), model=MODEL) as fake, \
            FakeServer(root, script(), model=MODEL, require_key_env=KEY_ENV,
                       env={KEY_ENV: "sk-the-right-key"}) as keyed:
        yield fake, keyed


@pytest.fixture(scope="module")
def finished_run(servers: tuple[FakeServer, FakeServer], tmp_path_factory: pytest.TempPathFactory,
                 small_warehouse: Path, cache_root: Path) -> Path:
    out = tmp_path_factory.mktemp("finished") / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NLQ2SQL_CACHE_DIR", str(cache_root))
        run_eval(EvalConfig(evalset="heldout", out=out, endpoint=servers[0].url, model=MODEL,
                            limit=2, concurrency=2))
    return out


@pytest.fixture
def ctx(tmp_path: Path, servers: tuple[FakeServer, FakeServer], finished_run: Path) -> Ctx:
    run = tmp_path / "existing-run"
    shutil.copytree(finished_run, run)
    (tmp_path / "notamodel").mkdir()
    (tmp_path / "notamodel" / "weights.bin").write_text("")
    return Ctx(tmp_path, servers[0], servers[1], run)


def run_case(case: Case, ctx: Ctx, argv: list[str]) -> tuple[int, str, float]:
    t0 = time.monotonic()
    result = CliRunner().invoke(app, argv, env=case.env)
    took = time.monotonic() - t0
    # Our errors exit via SystemExit; anything else escaping would have been a traceback.
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{case.id}: {type(result.exception).__name__}: {result.exception}")
    return result.exit_code, result.output, took


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, ctx: Ctx, monkeypatch: pytest.MonkeyPatch) -> None:
    from nlq2sql.run import models, server

    def no_model_work(*a: Any, **k: Any) -> Any:
        raise AssertionError("model work started for a bad input")

    monkeypatch.setattr(models, "pull", no_model_work)  # no download / conversion
    monkeypatch.setattr(server, "subprocess", SimpleNamespace(  # no server process
        Popen=no_model_work, DEVNULL=subprocess.DEVNULL, STDOUT=subprocess.STDOUT,
        TimeoutExpired=subprocess.TimeoutExpired))
    blocker = None
    if case.id == "serve-port-in-use":
        blocker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        blocker.bind(("127.0.0.1", 0))
        blocker.listen(1)
        (ctx.tmp / "port").write_text(str(blocker.getsockname()[1]))
        monkeypatch.setattr(server, "resolve_model", no_model_work)  # must fail before this
    argv = _point_existing(case, case.build(ctx), ctx)
    before = _snapshot(ctx.run)
    try:
        code, output, took = run_case(case, ctx, argv)
    finally:
        if blocker is not None:
            blocker.close()
    message = " ".join(output.split())
    assert code == 2, output
    assert "s3cret-pw" not in output  # endpoint-credentials: never echoed
    assert "Traceback" not in output, output
    for piece in case.expect(ctx):
        assert piece in message, f"{piece!r} not in {message!r}"
    assert took < 20, took  # fails fast (no retries, no waiting on a server)
    # No partial artifact.
    assert not ctx.out.exists(), sorted(p.name for p in ctx.out.rglob("*"))
    assert _snapshot(ctx.run) == before, "an existing run was changed"
    if os.environ.get("NLQ2SQL_BADINPUT_DUMP"):  # regenerates the table in docs/bad-inputs.md
        for real, shown in ((str(ctx.tmp), "<tmp>"), (str(ctx.fake.port), "<port>"),
                            (str(ctx.keyed.port), "<port>")):
            message = message.replace(real, shown)
        with open(os.environ["NLQ2SQL_BADINPUT_DUMP"], "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"id": case.id, "what": case.what, "message": message}) + "\n")


def test_catalogue_size() -> None:
    assert len(CASES) >= 30
    assert len({c.id for c in CASES}) == len(CASES)
