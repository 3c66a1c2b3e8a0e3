"""The viewer's files: one HTML page, its script and style, and data scripts made from the runs.

Served by :mod:`.server` or written by ``--out`` (works from ``file://``). Data travels as ``.js``
files each calling ``__nlq2sql_load(NAME, "JSON text")``, parsed with ``JSON.parse``: no ``fetch``,
no inline script, recorded text never evaluated. ``data/meta.js`` (runs, McNemar counts),
``data/r{K}-index.js`` (per-item columns), ``data/r{K}-text.js`` (raw output and SQL, loaded for
search), ``data/r{K}-c{J}.js`` (records, ``CHUNK`` per file, loaded on opening an item). The string
literal escapes every non-ASCII character, ``<``, ``>`` and ``&``, so no text can end a script or be markup."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import tempfile
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nlq2sql.conditions.registry import REGISTRY
from nlq2sql.errors import InputError
from nlq2sql.view.cues import CueExplainer
from nlq2sql.view.runs import Run, paired

if TYPE_CHECKING:
    from nlq2sql.records.typed import JsonValue

__all__ = ["ASSETS", "CHUNK", "CSP", "LOADER", "Bundle", "build_bundle", "data_script", "dumps", "js_string",
           "run_ids", "run_meta", "write_bundle"]

CHUNK = 500
LOADER = "__nlq2sql_load"
ASSETS = ("view.js", "view-items.js", "view-item.js", "view-compare.js", "view-summary.js", "view.css")
#: The page's policy: nothing remote, no inline script or handler, no string-to-HTML sinks.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'none'; font-src 'none'; object-src 'none'; base-uri 'none'; form-action 'none'; "
       "require-trusted-types-for 'script'; trusted-types nlq2sql")


def js_string(text: str) -> str:
    """A JavaScript string literal of ``text``: ASCII only, with ``<``, ``>`` and ``&`` escaped."""
    return json.dumps(text, ensure_ascii=True).replace("<", "\\u003c").replace(">", "\\u003e").replace(
        "&", "\\u0026")


def data_script(name: str, json_text: str) -> bytes:
    return f"{LOADER}({json.dumps(name)},{js_string(json_text)});\n".encode("ascii")


def dumps(obj: JsonValue) -> str:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False)


#: The run's own facts; every registered condition's manifest keys follow (``run_meta``).
_MANIFEST_FACTS = ("kind", "model", "prompt", "prompt_style", "guardrails", "evalset", "n_items", "concurrency",
                   "client", "endpoint", "sampling", "harness_version", "git_commit", "git_dirty", "started",
                   "finished", "limit", "evalset_sha256", "prompt_sha256", "semantic_model")


def _finite(obj: JsonValue) -> JsonValue:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def run_ids(runs: list[Run]) -> list[str]:
    """Each run's id in the page's links: its name (the shortest unique folder tail), made unique
    with ``~K`` where two runs given from different places share a whole shown path."""
    names = [run.name or run.path.name for run in runs]
    count = Counter(names)
    return [name if count[name] == 1 else f"{name}~{run.key}" for name, run in zip(names, runs, strict=True)]


def run_meta(run: Run, *, raw_files: bool, run_id: str | None = None) -> dict[str, Any]:
    m = run.manifest
    facts = {k: m.get(k) for k in (*_MANIFEST_FACTS, *REGISTRY.manifest_keys())}
    facts["condition_labels"] = REGISTRY.labels(m)  # the runs table's "conditions" column
    facts["server_version"] = run.facts.server_version
    facts["max_model_len"] = run.facts.max_model_len
    files = sorted(p.name for p in run.path.iterdir() if p.is_file()) if raw_files else []
    return {"key": run.key, "id": run_id or run.name or run.path.name, "label": run.label, "dir": run.shown,
            "name": run.name or run.path.name,
            "evalset_key": run.evalset_key, "facts": facts, "manifest": m, "summary": run.summary, "notes": run.notes,
            "n": run.n, "chunks": max(1, math.ceil(run.n / CHUNK)), "files": files}


class Bundle(Mapping[str, bytes]):
    """Every file of the page by relative path; record chunks are made when first asked for.

    The server asks for a chunk only when an item in it is opened, so a 100k-item run starts
    at once; ``--out`` writes them all.
    """

    def __init__(self, runs: list[Run], *, raw_files: bool = False) -> None:
        if not runs:
            raise InputError("no runs to show", field="RUN_DIR")
        static = resources.files(__package__).joinpath("static")
        files: dict[str, bytes] = {"index.html": static.joinpath("index.html").read_bytes().replace(
            b"{{CSP}}", CSP.encode())}
        for name in ASSETS:
            files[f"assets/{name}"] = static.joinpath(name).read_bytes()
        meta = {"version": 1, "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "chunk_size": CHUNK,
                "raw_files": raw_files, "runs": [run_meta(r, raw_files=raw_files, run_id=i)
                                                      for r, i in zip(runs, run_ids(runs), strict=True)],
                "skipped": list(getattr(runs, "skipped", [])),
                "pairs": [dataclasses.asdict(pair) for pair in paired(runs)]}
        files["data/meta.js"] = data_script("meta", dumps(_finite(meta)))
        self._chunks: dict[str, tuple[Run, int]] = {}
        for run in runs:
            files[f"data/r{run.key}-index.js"] = data_script(f"r{run.key}-index", dumps(run.cols))
            self._chunks[f"data/r{run.key}-text.js"] = (run, -1)
            for j in range(max(1, math.ceil(run.n / CHUNK))):
                self._chunks[f"data/r{run.key}-c{j}.js"] = (run, j)
        self._files = files
        self._made: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()
        self._explainer: CueExplainer | None = None

    def __getitem__(self, name: str) -> bytes:
        if name in self._files:
            return self._files[name]
        run, j = self._chunks[name]
        with self._lock:
            if name in self._made:
                self._made.move_to_end(name)
                return self._made[name]
            data = self._chunk(run, j)
            self._made[name] = data
            if len(self._made) > 64:
                self._made.popitem(last=False)
            return data

    def __iter__(self) -> Iterator[str]:
        yield from self._files
        yield from self._chunks

    def __len__(self) -> int:
        return len(self._files) + len(self._chunks)

    def __contains__(self, name: object) -> bool:
        return name in self._files or name in self._chunks

    def _chunk(self, run: Run, j: int) -> bytes:
        if j < 0:
            return data_script(f"r{run.key}-text", dumps(run.texts))
        lo, hi = j * CHUNK, min(run.n, (j + 1) * CHUNK)
        cues = {}
        for i in range(lo, hi):
            if run.cols["interventions"][i]:
                if self._explainer is None:
                    self._explainer = CueExplainer()
                question, ivs = _cue_inputs(json.loads(run.lines[i]))
                found = self._explainer.explain(run.guardrails, question, ivs)
                cues[str(i - lo)] = [dataclasses.asdict(e) for e in found]  # the page's JSON
        body = '{"records":[' + ",".join(run.lines[lo:hi]) + '],"cues":' + dumps(_finite(cues)) + "}"
        return data_script(f"r{run.key}-c{j}", body)


def _cue_inputs(obj: dict[str, Any]) -> tuple[str, list[JsonValue]]:
    """An item's question and interventions from its parsed line (the JSON edge), record or not,
    as :func:`~nlq2sql.view.runs._row` reads the columns: a record's keys are its parts'."""
    question, ivs = obj.get("question"), obj.get("interventions")
    return question if isinstance(question, str) else "", ivs if isinstance(ivs, list) else []


def build_bundle(runs: list[Run], *, raw_files: bool = False) -> Bundle:
    """Every file of the page, by relative path."""
    return Bundle(runs, raw_files=raw_files)


def write_bundle(files: Mapping[str, bytes], out: Path, *, force: bool = False) -> Path:
    """Write the bundle to ``out`` (via a temporary sibling and a rename: never half a bundle)."""
    if out.exists() and not out.is_dir():
        raise InputError("exists and is not a directory", path=str(out))
    if out.exists() and any(out.iterdir()) and not force:
        raise InputError("exists and is not empty; pass --force to replace it", path=str(out))
    parent = out.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
    except OSError as exc:
        raise InputError(f"cannot write here: {exc.strerror}", path=str(out)) from None
    try:
        for rel, data in files.items():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        os.chmod(tmp, 0o755)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
