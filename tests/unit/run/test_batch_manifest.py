"""A batch's manifest as a model (``records.batch_parts.BatchManifest``, built by ``run.batch_manifest``).

``tests/fixtures/batch-manifests/`` holds manifests written by the code that built the manifest as
a dict (commit f70a659, the last before the model), one per shape a batch has: an eval set, a
question file, a URI and a resumed session, two replicas, the SQL answers, a condition on, the
in-process vLLM engine.  No batch run is committed under ``reports/``, so these stand for them:
each is read back through the model and written again byte for byte, resumed as the dict was,
and built again by today's builder with the same keys, order and values (those of the machine
aside: the commit, the database's path and hash, the clock; and ``excluded``, the partial layer's
exclusions, a key written since, after ``db_sha256``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from snapshot import assert_same_json

from nlq2sql.conditions.registry import REGISTRY
from nlq2sql.errors import RecordError
from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.records.manifest_parts import ServerFacts
from nlq2sql.run import batch_manifest
from nlq2sql.run.batch import load_items
from nlq2sql.run.batch_config import BatchConfig, item_config
from nlq2sql.run.batch_manifest import build_manifest, manifest_model, resumed_manifest
from nlq2sql.run.batch_vllm import engine_args
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.endpoints import ReplicaSpec
from nlq2sql.run.item import load_conditions
from nlq2sql.run.sql_grammar import grammar_for
from nlq2sql.semantic import open_warehouse
from nlq2sql.stages.prompt import load_prompt
from nlq2sql.stages.rulesets import load_guardrails
from nlq2sql.transport.client import RetryBudget, Sampling

FIXTURES = PROJECT_ROOT / "tests" / "fixtures" / "batch-manifests"
PATHS = sorted(FIXTURES.glob("*.json"))
#: Facts of the machine and the moment, not of the batch.
MACHINE = {"git_commit", "git_dirty", "harness_version", "db", "db_sha256", "started", "finished"}
ENDPOINT = "http://127.0.0.1:9/v1"


def text(data: Any) -> str:
    """As ``BatchOut.write_json`` writes a manifest."""
    return json.dumps(data, indent=2, default=str) + "\n"


def test_the_fixtures_cover_every_shape() -> None:
    assert {p.stem for p in PATHS} == set(SHAPES)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_a_written_manifest_is_read_and_written_again_as_parsed(path: Path) -> None:
    raw = json.loads(path.read_text(encoding="utf-8"))
    assert_same_json(manifest_model().from_json(raw, path=str(path)).to_json(), raw, path)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_a_resumed_manifest_is_continued_as_the_dict_was(path: Path) -> None:
    """``old | {"sessions": [...]}``, then ``finished`` (a manifest that already had ``finished``:
    the driver was killed between its last two writes)."""
    old = json.loads(path.read_text(encoding="utf-8"))
    expected = old | {"sessions": [*old.get("sessions", []), {"started": 5.5}]}
    expected["finished"] = 6.5
    manifest = manifest_model().from_json(old, path=str(path))
    manifest.resumed(5.5)
    manifest.finished = 6.5
    assert_same_json(manifest.to_json(), expected, path)


def test_resume_names_what_differs_and_a_manifest_that_is_not_one_is_refused() -> None:
    old = json.loads((FIXTURES / "evalset-parquet.json").read_text(encoding="utf-8"))
    manifest = manifest_model().from_json(old, path="m")
    assert resumed_manifest(old, manifest, "out").sessions is not None
    changed = manifest.model_copy(update={"shard_rows": 3})
    with pytest.raises(RecordError, match=r"cannot resume: the batch differs \(shard_rows: was 8, now 3\)"):
        resumed_manifest(old, changed, "out")
    with pytest.raises(RecordError, match="not a batch manifest"):
        manifest_model().from_json({**old, "surprise": 1}, path="m")


def _questions(tmp: Path) -> Path:
    """The question file the fixtures were made with: heldout's first three questions."""
    lines = (PROJECT_ROOT / "evalsets" / "heldout.jsonl").read_text(encoding="utf-8").splitlines()[:3]
    path = tmp / "q.jsonl"
    path.write_text("".join(json.dumps({"id": f"q{i}", "question": json.loads(ln)["question"]}) + "\n"
                            for i, ln in enumerate(lines)))
    return path


BASE = EvalConfig(endpoint=ENDPOINT, model="fake-model", limit=20, timeout_s=10.0, sampling=Sampling(max_tokens=128))
VLLM = replace(BASE, endpoint=None, model="smollm2-135m")
#: Each fixture's batch: (its config from the question file's path, whether vLLM ran in-process, resumed).
SHAPES: dict[str, tuple[Callable[[Path], BatchConfig], bool, bool]] = {
    "evalset-parquet": (lambda q: BatchConfig(base=BASE, out=Path("/tmp/x/batch"), shard_rows=8), False, False),
    "evalset-jsonl-uri-resumed": (lambda q: BatchConfig(base=BASE, out="file:///tmp/x/batch", format="jsonl",
                                                        shard_rows=4, actors=2, concurrency=2), False, True),
    "questions": (lambda q: BatchConfig(base=BASE, input=str(q), questions=True, out=Path("/tmp/x/q")), False, False),
    "replicas": (lambda q: BatchConfig(base=replace(BASE, replicas=(ReplicaSpec(url="http://127.0.0.1:10/v1"),),
                                                    routing="round-robin"), out=Path("/tmp/x/r")), False, False),
    "answer-sql": (lambda q: BatchConfig(base=replace(BASE, answer="sql", prompt="sql", guardrails=()),
                                         input="heldout-v2", out=Path("/tmp/x/s")), False, False),
    "answer-sql-grammar": (lambda q: BatchConfig(base=replace(BASE, answer="sql-grammar", prompt="sql", guardrails=()),
                                                 input="heldout-v2", out=Path("/tmp/x/s")), False, False),
    "conditions": (lambda q: BatchConfig(base=replace(BASE, conditions=REGISTRY.from_options(examples=2)),
                                         out=Path("/tmp/x/c")), False, False),
    "ray-vllm": (lambda q: BatchConfig(base=VLLM, engine="ray-vllm", out=Path("/tmp/x/v"), format="jsonl",
                                       shard_rows=4, concurrency=4), True, False),
    "ray-vllm-questions": (lambda q: BatchConfig(base=VLLM, engine="ray-vllm", input=str(q), questions=True,
                                                 out=Path("/tmp/x/v2")), True, False),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_the_builder_writes_what_the_dict_wrote(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def probe(url: str, model: str, key: str) -> ServerFacts:
        return ServerFacts(base_url=url, served_models=[model], max_model_len=2048, server_version="0.32.0")

    monkeypatch.setattr(batch_manifest, "probe_endpoint", probe)
    make, vllm, resumed = SHAPES[name]
    cfg = make(_questions(tmp_path))
    wcfg = item_config(cfg)
    wh = open_warehouse(wcfg.semantic_model, wcfg.warehouse)
    rulesets = load_guardrails(wcfg.conditions.guardrails(wcfg.guardrails), wh.catalog, wh)
    items, evalset, sha = load_items(cfg, wh)
    grammar = grammar_for(wcfg.answer, wh)
    prompt = load_prompt(wcfg.prompt, wcfg.style, wh)
    manifest = build_manifest(cfg, wcfg, evalset, rulesets, wh, sha, len(items), prompt, load_conditions(wcfg, wh),
                              "k", RetryBudget.allowed(len(items), wcfg.retry_budget),
                              grammar.text if grammar is not None else None)
    if vllm:  # what the in-process engine adds
        manifest.model, manifest.engine_kwargs, manifest.gpus = "smollm2-135m", engine_args(cfg, wcfg, 0), 0
    if resumed:
        manifest = resumed_manifest(json.loads(text(manifest.to_json())), manifest, "out")
    manifest.finished = 1.0
    built = manifest.to_json()
    expected = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    assert built.pop("excluded") == [], "the warehouse's exclusions, recorded since the fixtures (none here)"
    assert built.pop("link_schema", None) is None, "schema linking's key, added since the fixtures (off here)"
    assert len(built.pop("layer_sha256")) == 64, "the layer by content, recorded since the fixtures"
    assert set(built) == set(expected)
    assert {k: v for k, v in built.items() if k not in MACHINE | {"sessions"}} == \
        {k: v for k, v in expected.items() if k not in MACHINE | {"sessions"}}
