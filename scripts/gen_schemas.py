"""Write the JSON Schemas generated from the models into ``schemas/``.

Run after changing :class:`nlq2sql.stages.intent.Intent`, :class:`nlq2sql.stages.evalset.EvalCase`,
:class:`nlq2sql.stages.queryset.QueryCase`,
:class:`nlq2sql.stages.goldsql.GoldSqlLine`, the run
results (:mod:`nlq2sql.records.results`), the load tools' results (:mod:`nlq2sql.load.results`) or the
default warehouse's semantic model (the intent schemas are the ``retail`` vocabulary's);
``tests/unit/records/test_schema.py`` fails while the committed files differ from what the models generate.

    .venv/bin/python scripts/gen_schemas.py [--check]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from nlq2sql.conditions.registry import REGISTRY
from nlq2sql.load.results import RESULT_MODELS
from nlq2sql.records.results import Summary
from nlq2sql.semantic.catalog import load_catalog
from nlq2sql.stages.evalset import EvalCase
from nlq2sql.stages.goldsql import GoldSqlLine
from nlq2sql.stages.intent import intent_schema
from nlq2sql.stages.queryset import QueryCase

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2) + "\n"


def generated() -> dict[str, str]:
    """File name → text the models generate now."""
    retail = load_catalog("retail")  # the shipped intent schemas are the retail warehouse's
    return {
        "intent.schema.json": render(intent_schema(retail)),
        "intent-branches.schema.json": render(intent_schema(retail, "branches")),
        "evalset-line.schema.json": render(EvalCase.model_json_schema()),
        "evalset-v2-line.schema.json": render(QueryCase.model_json_schema()),
        "evalset-gold-sql-line.schema.json": render(GoldSqlLine.model_json_schema()),
        "summary.schema.json": render(Summary.model_json_schema()),
        "manifest.schema.json": render(REGISTRY.manifest_model().model_json_schema()),  # with every condition's keys
        **{f"{kind}.schema.json": render(model.model_json_schema(by_alias=True))
           for kind, model in RESULT_MODELS.items()},
    }


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for name, text in generated().items():
        path = SCHEMA_DIR / name
        if check:
            if not path.is_file() or path.read_text() != text:
                stale.append(name)
            continue
        SCHEMA_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    if stale:
        print(f"stale: {', '.join(stale)} (run scripts/gen_schemas.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
