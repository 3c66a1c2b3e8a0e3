"""No core function falls back to a warehouse it was not given (issue 24).

The shipped ``retail`` is the CLI's default (``--semantic-model``), chosen at the CLI edge; a
library call that forgets its catalog must fail loudly, not silently score against retail.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest
from retail import RETAIL

from nlq2sql.answers.kinds import bind_sampling
from nlq2sql.cli._common import CLI_WAREHOUSE
from nlq2sql.load.grid import context_block
from nlq2sql.load.levels import expand_evalset
from nlq2sql.records.results import LEGACY_WAREHOUSE, manifest_warehouse
from nlq2sql.run.config import EvalConfig
from nlq2sql.semantic.binding import open_warehouse
from nlq2sql.semantic.catalog import load_catalog
from nlq2sql.stages.evalset import index_evalset, load_evalset, parse_line, resolve_path
from nlq2sql.stages.intent import Intent, branch_schema, compact_regex, intent_schema, parse_intent
from nlq2sql.stages.prompt import SLOT, load_prompt
from nlq2sql.stages.score import case_record, intent_record
from nlq2sql.stages.sqlbuild import build_sql
from nlq2sql.transport.client import Sampling, request_kwargs

#: (function, the parameter naming its warehouse)
CORE: list[tuple[Callable[..., Any], str]] = [
    (parse_intent, "catalog"), (intent_schema, "catalog"), (branch_schema, "catalog"), (compact_regex, "catalog"),
    (build_sql, "catalog"), (parse_line, "catalog"), (load_evalset, "catalog"), (index_evalset, "catalog"),
    (resolve_path, "warehouse"), (case_record, "catalog"), (intent_record, "catalog"),
    (load_prompt, "wh"), (open_warehouse, "semantic_model"), (load_catalog, "name_or_path"),
    (expand_evalset, "semantic_model"), (context_block, "semantic_model"),
]

INTENT = Intent.model_validate({"intent": "breakdown", "metric": "revenue", "dimension": "region",
                                "time_grain": None, "filters": [], "limit": None, "order": None})


@pytest.mark.parametrize(("fn", "param"), CORE, ids=[f.__name__ for f, _ in CORE])
def test_the_warehouse_parameter_has_no_default(fn: Callable[..., Any], param: str) -> None:
    p = inspect.signature(fn).parameters[param]
    assert p.default is inspect.Parameter.empty, f"{fn.__name__}({param}=...) must be given, not defaulted"


@pytest.mark.parametrize("call", [
    lambda: parse_intent('{"intent": "breakdown"}'),  # type: ignore[call-arg]
    lambda: build_sql(INTENT),  # type: ignore[call-arg]
    lambda: intent_schema(),  # type: ignore[call-arg]
    lambda: compact_regex(),  # type: ignore[call-arg]
    lambda: branch_schema("breakdown"),  # type: ignore[call-arg]
    lambda: load_evalset("heldout"),  # type: ignore[call-arg]
    lambda: resolve_path("heldout"),  # type: ignore[call-arg]
    lambda: intent_record("q1", "revenue by region", None, [], None, gold=None),  # type: ignore[call-arg, arg-type]
    lambda: open_warehouse(),  # type: ignore[call-arg]
    lambda: load_catalog(),  # type: ignore[call-arg]
], ids=["parse_intent", "build_sql", "intent_schema", "compact_regex", "branch_schema", "load_evalset",
        "resolve_path", "intent_record", "open_warehouse", "load_catalog"])
def test_a_call_without_a_warehouse_is_refused(call: Callable[[], Any]) -> None:
    with pytest.raises(TypeError, match="missing|required"):
        call()


def test_given_a_warehouse_the_same_calls_work() -> None:
    """The refusal above is about the missing argument, not a broken function."""
    assert parse_intent(INTENT.model_dump_json(), RETAIL) == INTENT
    assert "region" in build_sql(INTENT, RETAIL).sql.lower()
    assert intent_schema(RETAIL)["properties"]["metric"]["enum"][0] in RETAIL.metrics


def test_an_unbound_json_sampling_is_refused_not_given_retail() -> None:
    """A JSON-constrained request whose schema was never bound to a warehouse raises; it used to
    send the retail schema whatever the run's warehouse."""
    msgs = [{"role": "user", "content": "q"}]
    with pytest.raises(ValueError, match="bind the sampling"):
        request_kwargs("m", msgs, Sampling())
    bound = request_kwargs("m", msgs, bind_sampling(Sampling(), RETAIL))
    assert bound["extra_body"]["structured_outputs"]["json"] == intent_schema(RETAIL)


def test_a_prompt_read_without_a_warehouse_keeps_its_slots() -> None:
    """``load_prompt(..., wh=None)`` checks the file only; it never fills retail's names in."""
    bare = load_prompt("baseline", "default", None)
    assert SLOT.search(bare.text), "the baseline prompt has warehouse slots"


def test_the_cli_and_config_name_their_default_and_old_manifests_their_warehouse() -> None:
    """retail is chosen visibly at the edges: the CLI option's default, the run config's field, and
    for a manifest recorded before runs named their semantic model, the legacy warehouse."""
    from typer.main import get_command

    from nlq2sql.cli.main import app

    assert CLI_WAREHOUSE == EvalConfig().semantic_model == LEGACY_WAREHOUSE == "retail"
    for name in ("eval", "score", "batch"):
        cmd = get_command(app).commands[name]  # type: ignore[attr-defined]
        opt = next(p for p in cmd.params if "--semantic-model" in getattr(p, "opts", []))
        assert opt.default == CLI_WAREHOUSE, name
    assert manifest_warehouse({}) == LEGACY_WAREHOUSE
    assert manifest_warehouse({"semantic_model": "tpch"}) == "tpch"
    named = {"semantic_model": "x", "semantic_model_path": "warehouses/x/m.yml"}
    assert manifest_warehouse(named) == "warehouses/x/m.yml"
