"""The committed JSON Schemas equal what the models generate, and the intent schema stays
inside the subset every grammar backend accepts."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from repo_paths import ROOT
from retail import RETAIL, retail_wh

from nlq2sql.load.results import RESULT_MODELS
from nlq2sql.stages.evalset import EvalCase, gold_kind, load_evalset
from nlq2sql.stages.goldsql import GoldSqlLine
from nlq2sql.stages.intent import FIELDS, intent_schema
from nlq2sql.stages.queryset import QueryCase

SCHEMAS = ROOT / "schemas"


def _gen_module() -> Any:
    spec = importlib.util.spec_from_file_location("gen_schemas", ROOT / "scripts" / "gen_schemas.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _walk(node: Any, path: str = "#") -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        out.append((path, node))
        for k, v in node.items():
            out += _walk(v, f"{path}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _walk(v, f"{path}/{i}")
    return out


@pytest.mark.parametrize("name, generate", [
    ("intent.schema.json", lambda: intent_schema(RETAIL)),
    ("evalset-line.schema.json", EvalCase.model_json_schema),
    ("evalset-v2-line.schema.json", QueryCase.model_json_schema),
    ("evalset-gold-sql-line.schema.json", GoldSqlLine.model_json_schema),
])
def test_committed_schema_matches_models(name: str, generate: Any) -> None:
    committed = (SCHEMAS / name).read_text()
    assert committed == json.dumps(generate(), indent=2) + "\n", \
        f"schemas/{name} is stale: run .venv/bin/python scripts/gen_schemas.py"


def test_gen_script_writes_exactly_the_committed_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    mod = _gen_module()
    assert mod.main(["--check"]) == 0
    monkeypatch.setattr(mod, "SCHEMA_DIR", tmp_path)
    assert mod.main([]) == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == sorted(["evalset-line.schema.json", "evalset-v2-line.schema.json",
                              "evalset-gold-sql-line.schema.json",
                              "intent-branches.schema.json", "intent.schema.json",
                              "manifest.schema.json", "summary.schema.json",
                              *(f"{kind}.schema.json" for kind in RESULT_MODELS)])
    assert written == sorted(p.name for p in SCHEMAS.iterdir())  # nothing committed that no model makes
    for name in written:
        assert (tmp_path / name).read_bytes() == (SCHEMAS / name).read_bytes()
    (tmp_path / "intent.schema.json").write_text("{}\n")
    assert mod.main(["--check"]) == 1


def test_intent_schema_uses_no_conditional_or_reference_keywords() -> None:
    for path, node in _walk(intent_schema(RETAIL)):
        for kw in ("if", "then", "else", "oneOf", "allOf", "not", "$ref", "$defs", "definitions"):
            assert kw not in node, f"{path} uses {kw!r}"


def test_intent_schema_is_closed_and_requires_every_key() -> None:
    schema = intent_schema(RETAIL)
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert list(schema["properties"]) == list(FIELDS) and len(FIELDS) == 7
    assert sorted(schema["required"]) == sorted(FIELDS)
    flt = schema["properties"]["filters"]["items"]
    assert flt["additionalProperties"] is False
    assert sorted(flt["required"]) == ["field", "op", "value"]


def test_every_number_string_and_array_is_bounded() -> None:
    schema = intent_schema(RETAIL)
    numeric = [(p, n) for p, n in _walk(schema) if n.get("type") in ("integer", "number")]
    assert numeric, "limit must be a bounded integer"
    for path, node in numeric:
        assert "minimum" in node and "maximum" in node, path
    limit = next(a for a in schema["properties"]["limit"]["anyOf"] if a.get("type") == "integer")
    assert (limit["minimum"], limit["maximum"]) == (1, 100)
    for path, node in _walk(schema):
        if node.get("type") == "string":
            assert "enum" in node or "maxLength" in node, f"{path}: unbounded string"
        if node.get("type") == "array":
            assert "maxItems" in node, f"{path}: unbounded array"


def test_shipped_evalsets_validate_against_the_line_schema() -> None:
    line_schema = json.loads((SCHEMAS / "evalset-line.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(line_schema)
    for name in ("dev", "heldout", "adversarial"):
        es = load_evalset(name, retail_wh())
        for raw in Path(es.path).read_text().splitlines():
            errors = list(validator.iter_errors(json.loads(raw)))
            assert not errors, (name, raw, errors[0].message)
    assert list(validator.iter_errors({"id": "x"})), "an incomplete line must not validate"


def test_gold_sql_lines_validate_against_their_schema() -> None:
    validator = jsonschema.Draft202012Validator(json.loads((SCHEMAS / "evalset-gold-sql-line.schema.json").read_text()))
    good = [{"id": "a", "question": "q", "gold_sql": "SELECT 1"},
            {"id": "b", "question": "q", "gold_sql": ["SELECT 1", "SELECT 2"], "ordered": True, "category": "top_n",
             "tags": ["x"], "pair_id": "p", "source_sql": "SELECT 1", "source_dialect": "postgres"},
            {"id": "c", "question": "q", "gold_sql": None, "answerable": False}]
    for line in good:
        assert not list(validator.iter_errors(line)), line
    assert list(validator.iter_errors({"id": "d", "question": "q"})), "gold_sql is required"
    assert list(validator.iter_errors({"id": "d", "question": "q", "gold_sql": "x", "gold": {}})), "closed"


#: The schema of each kind of line (:func:`nlq2sql.stages.evalset.gold_kind`).
LINE_SCHEMAS = {"v1": "evalset-line.schema.json", "v2": "evalset-v2-line.schema.json",
                "gold_sql": "evalset-gold-sql-line.schema.json"}
SHIPPED_SETS = sorted([*ROOT.glob("evalsets/*.jsonl"), *ROOT.glob("warehouses/*/evalsets/*.jsonl")])


def test_every_shipped_line_validates_against_its_kinds_schema() -> None:
    validators = {k: jsonschema.Draft202012Validator(json.loads((SCHEMAS / n).read_text()))
                  for k, n in LINE_SCHEMAS.items()}
    assert len(SHIPPED_SETS) >= 20, SHIPPED_SETS
    kinds: set[str] = set()
    for path in SHIPPED_SETS:
        for n, raw in enumerate(path.read_text().splitlines(), start=1):
            obj = json.loads(raw)
            kind = gold_kind(obj)
            assert kind in validators, (path, n, kind)
            kinds.add(kind)
            errors = list(validators[kind].iter_errors(obj))
            assert not errors, (str(path.relative_to(ROOT)), n, errors[0].message)
    assert kinds == set(LINE_SCHEMAS), kinds  # every format is exercised by what ships


def test_category_is_optional_in_every_line_schema() -> None:
    for name in LINE_SCHEMAS.values():
        schema = json.loads((SCHEMAS / name).read_text())
        assert "category" in schema["properties"], name
        assert "category" not in schema.get("required", []), name
        assert {"id", "question"} <= set(schema["required"]), name


def test_v2_line_schema_refuses_what_the_loader_refuses() -> None:
    validator = jsonschema.Draft202012Validator(json.loads((SCHEMAS / "evalset-v2-line.schema.json").read_text()))
    good = {"id": "a", "question": "q", "gold": {"metrics": ["revenue"], "group_by": ["customer__region"]}}
    assert not list(validator.iter_errors(good))
    assert not list(validator.iter_errors({"id": "u", "question": "q", "gold": None, "answerable": False}))
    assert list(validator.iter_errors({**good, "gold": {"metrics": ["revenue"], "colour": 1}})), "closed gold"
    assert list(validator.iter_errors({**good, "gold": {"metrics": ["x"], "where": [{"field": "f", "op": "like",
                                                                                       "values": ["a"]}]}})), "op enum"
    assert list(validator.iter_errors({"id": "a", "question": "q"})), "gold is required"
