"""The package layout is the architecture: imports go down the layers, never in a circle.

Every module under ``nlq2sql/`` is parsed with :mod:`ast`, and every import of our own modules is
an edge: module-level, function-level (a deferred import only hides a cycle until the function
runs) and under ``if TYPE_CHECKING:`` (a type two modules need of each other is one concept split
in two: merge them, or move the type down).  The layer order is the one in ``docs/layout.md``; a
package may import itself, and a module may import any lower layer.  Deferred imports of our own
modules are counted and held to a ratchet (they are for start-up time only).  The same walk checks
``__all__`` on every public module (modules are as long as their concept needs: no line cap).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from repo_paths import ROOT

PACKAGE_ROOT = ROOT / "nlq2sql"

# Lowest first.  The ground floor holds the top-level modules (errors, paths, inputs, env_info).
LAYERS: tuple[str, ...] = (
    "",
    "records",
    "semantic",
    "stages",
    "answers",
    "transport",
    "conditions",
    "run",
    "load",
    "experiments",
    "view",
    "cli",
)


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE_ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE_ROOT.rglob("*.py"))}


MODULES = _modules()


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:  # nlq2sql/__init__.py
        return 0
    top = parts[1]
    if f"nlq2sql.{top}" in MODULES and (PACKAGE_ROOT / top).is_dir():
        return LAYERS.index(top)
    return 0  # a ground-floor module


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, wherever it stands (``if TYPE_CHECKING:`` bodies and functions included)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


def _deferred(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements inside a function (or lambda) body, each once: they run when it is called."""
    seen: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            for inner in ast.iter_child_nodes(node):
                for imp in _imports(inner):
                    if id(imp) not in seen:
                        seen.add(id(imp))
                        yield imp


def _names(module: str, path: Path, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The nlq2sql modules one import statement names (a ``from pkg import sub`` names ``pkg.sub``)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name.split(".")[0] == "nlq2sql" and a.name in MODULES}
    if node.level:
        base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    if source.split(".")[0] != "nlq2sql":
        return set()
    out = {f"{source}.{a.name}" if f"{source}.{a.name}" in MODULES else source for a in node.names}
    return {t for t in out if t in MODULES}


def _targets(module: str, path: Path) -> set[str]:
    """The nlq2sql modules ``module`` imports, anywhere in it."""
    out: set[str] = set()
    for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
        out |= _names(module, path, node)
    out.discard(module)
    return out


GRAPH: dict[str, set[str]] = {m: _targets(m, p) for m, p in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_walk_sees_the_package() -> None:
    # Guards the test itself: a walk that found nothing would pass everything below.
    assert "nlq2sql.run.item" in MODULES and "nlq2sql.cli.main" in MODULES
    assert GRAPH["nlq2sql.cli.main"], "cli.main imports nothing of ours?"
    assert _layer("nlq2sql.errors") == 0 and _layer("nlq2sql.cli.main") == LAYERS.index("cli")


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_walk_sees_type_checking_and_deferred_imports() -> None:
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from nlq2sql.errors import InputError\n"
                     "def f():\n    import nlq2sql.paths\n    def g():\n        from . import env_info\n")
    path = PACKAGE_ROOT / "inputs.py"
    assert {t for node in _imports(tree) for t in _names("nlq2sql.inputs", path, node)} == {
        "nlq2sql.errors", "nlq2sql.paths", "nlq2sql.env_info"}
    # a nested function's import counts once
    assert sorted(t for node in _deferred(tree) for t in _names("nlq2sql.inputs", path, node)) == [
        "nlq2sql.env_info", "nlq2sql.paths"]


#: Import cycles that exist today and are being removed; any other cycle fails, and so does one of
#: these once it is gone (delete its line then).  Each is the exact set of modules in the cycle.
ALLOWED_CYCLES: tuple[frozenset[str], ...] = ()


def test_no_import_cycle() -> None:
    cycles = {frozenset(c) for c in _cycles(GRAPH)}
    new = [sorted(c) for c in cycles if c not in ALLOWED_CYCLES]
    assert not new, ("import cycles inside nlq2sql/ (TYPE_CHECKING and function-level imports count: merge the "
                     "modules if they are one concept, else move the shared type down):\n"
                     + "\n".join(" <-> ".join(c) for c in new))
    gone = [sorted(c) for c in ALLOWED_CYCLES if c not in cycles]
    assert not gone, "allowed cycles that no longer exist (delete them from ALLOWED_CYCLES): " + repr(gone)


#: Function-level imports of our own modules.  Each says why on its line (``# deferred: <reason>``):
#: start-up time (``nlq2sql --help`` and ``nlq2sql sql`` import ``cli._common`` only; a command's
#: module imports what the command needs at module level), a measured import phase, or a cycle or
#: a heavy optional dependency (Ray, vLLM, Playwright) that a module-level import would bring.
#: A ratchet: the count may fall, never rise; when you remove some, lower this number.
DEFERRED_IMPORTS_MAX = 3

#: The mark a deferred import carries, with its reason.
DEFERRED_MARK = re.compile(r"#\s*deferred:\s*\S")


def _deferred_imports() -> dict[str, list[tuple[int, bool]]]:
    """Per module, each function-level import of an nlq2sql module: (line, whether it says why)."""
    out: dict[str, list[tuple[int, bool]]] = {}
    for module, path in MODULES.items():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        found = [(node.lineno, any(DEFERRED_MARK.search(line) for line in lines[node.lineno - 1:node.end_lineno]))
                 for node in _deferred(ast.parse(text)) if _names(module, path, node)]
        if found:
            out[module] = sorted(found)
    return out


def test_deferred_imports_of_our_modules_do_not_grow() -> None:
    counts = {module: len(found) for module, found in _deferred_imports().items()}
    total = sum(counts.values())
    top = ", ".join(f"{m} {n}" for m, n in sorted(counts.items(), key=lambda x: -x[1])[:10])
    assert total <= DEFERRED_IMPORTS_MAX, (
        f"{total} function-level imports of nlq2sql modules, above the ratchet of {DEFERRED_IMPORTS_MAX}: import at "
        f"module level (a deferred import is for start-up time only). Most: {top}")


def test_every_deferred_import_of_our_modules_says_why() -> None:
    silent = [f"{MODULES[m].relative_to(PACKAGE_ROOT.parent)}:{line}"
              for m, imports in sorted(_deferred_imports().items()) for line, marked in imports if not marked]
    assert not silent, ("function-level imports of nlq2sql modules without '# deferred: <reason>' on their line: "
                        "import at module level, or say why it must wait (start-up time, a heavy optional "
                        "dependency, a cycle): " + ", ".join(silent))


def test_imports_go_down_the_layers() -> None:
    upward = [
        f"{src} ({LAYERS[_layer(src)] or 'ground'}) imports {dst} ({LAYERS[_layer(dst)] or 'ground'})"
        for src, targets in sorted(GRAPH.items())
        for dst in sorted(targets)
        if _layer(dst) > _layer(src)
    ]
    assert not upward, "upward imports:\n" + "\n".join(upward)


PUBLIC = sorted(m for m in MODULES if not any(part.startswith("_") for part in m.split(".")))


@pytest.mark.parametrize("module", PUBLIC)
def test_public_module_declares_all(module: str) -> None:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    declared = [
        node
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        and any(isinstance(t, ast.Name) and t.id == "__all__" for t in
                (node.targets if isinstance(node, ast.Assign) else [node.target]))
    ]
    assert declared, f"{module} has no __all__"


# ``dict[str, Any]`` is confined to the JSON edges (issue 24): each module that still names it is
# listed here with how many lines do and which edge they are; any other module names it on no
# line.  A count here is exact: a new line fails (type the value, or add it here with its edge),
# and so does a typed-away one (lower the count, or drop the module).  Measured: 483 lines at the
# start of the work (b3049e0), 436 at 6a2b2ab, 195 at f70a659; the sum of this table now.
SCHEMA = "a JSON Schema document"
HTTP = "an HTTP request body or response object, as sent or received"
DUMP = "a type's JSON at the write (its serialiser or dump)"
READ = "a JSON object just read from a file, before it becomes a type"
OUTPUT = "a parsed model output (intent or query dump), as the record holds it"
LINES = "record lines as read or written"
DBT = "dbt YAML and MetricFlow's manifest JSON, as parsed"
KWARGS = "keyword arguments handed to a constructor"
JSON_EDGES: dict[str, tuple[int, str]] = {
    "nlq2sql.cli.load": (4, "the values a generated option gave, before the settings model validates them"),
    "nlq2sql.inputs": (1, READ),
    "nlq2sql.records.store": (4, LINES),
    "nlq2sql.records.results": (1, f"{READ} (a manifest's warehouse)"),
    "nlq2sql.records.typed": (1, DUMP),
    "nlq2sql.records.batch_parts": (2, f"{DUMP}; {READ}"),
    "nlq2sql.records.manifest_parts": (1, KWARGS),
    "nlq2sql.semantic.contract": (9, SCHEMA),
    "nlq2sql.semantic.dbt_project": (4, DBT),
    "nlq2sql.semantic.manifest": (13, f"{DBT}; {SCHEMA}"),
    "nlq2sql.semantic.project": (4, DBT),
    "nlq2sql.stages.intent": (12, SCHEMA),
    "nlq2sql.stages.guardrail": (8, f"{OUTPUT}; a TOML table as parsed"),
    "nlq2sql.stages.semantic_tools": (4, f"{SCHEMA}; {OUTPUT}"),
    "nlq2sql.stages.score": (3, OUTPUT),
    "nlq2sql.stages.value_links": (2, OUTPUT),
    "nlq2sql.stages.learned_guardrail": (2, f"{OUTPUT}; the JSON payload a hash is taken of"),
    "nlq2sql.stages.query_score": (1, OUTPUT),
    "nlq2sql.stages.query_guard": (1, OUTPUT),
    "nlq2sql.stages.queryset": (1, READ),
    "nlq2sql.stages.goldsql": (1, READ),
    "nlq2sql.stages.goldsql_import": (1, f"{READ}; a set line as written"),
    "nlq2sql.stages.report": (1, f"{READ} (a rate in a report's JSON)"),
    "nlq2sql.answers.sql.score": (1, OUTPUT),
    "nlq2sql.answers.sql.guard": (1, "DuckDB's parse tree, as its JSON"),
    "nlq2sql.transport.client": (6, f"{HTTP}; {SCHEMA}"),
    "nlq2sql.transport.rawclient": (2, HTTP),
    "nlq2sql.transport.stream": (2, HTTP),
    "nlq2sql.conditions.planner": (2, SCHEMA),
    "nlq2sql.conditions.registry": (2, f"{KWARGS} (pydantic's create_model); raw CLI options before validation"),
    "nlq2sql.run.batch_vllm": (3, "Ray Data rows; vLLM's SamplingParams keywords"),
    "nlq2sql.run.batch_shards": (1, LINES),
    "nlq2sql.run.canary": (1, SCHEMA),
    "nlq2sql.run.endpoint_facts": (1, DUMP),
    "nlq2sql.run.server": (1, HTTP),
    "nlq2sql.load.capacity": (3, f"{READ} (a model's config.json)"),
    "nlq2sql.load.serialization": (2, HTTP),
    "nlq2sql.load.results": (1, DUMP),
    "nlq2sql.load.driver": (1, DUMP),
    "nlq2sql.load.probes": (1, HTTP),
    "nlq2sql.load.probe_figures": (1, HTTP),
    "nlq2sql.load.sweep": (1, KWARGS),
    "nlq2sql.experiments.backends": (1, SCHEMA),
    "nlq2sql.experiments.gate_inputs": (1, READ),
    "nlq2sql.view.runs": (4, f"{READ} (an untrusted run's files, read tolerantly)"),
    "nlq2sql.view.bundle": (2, f"the page's data (meta.js); {READ}"),
    "nlq2sql.cli._common": (1, "a command's parsed options"),
    "nlq2sql.run.spec": (1, "flat run spec values: a command line's, a preset's or a recorded run's options"),
    "nlq2sql.cli.guardrail": (1, "a command's JSON output"),
}


def _dict_any_lines() -> dict[str, int]:
    counts = {module: sum("dict[str, Any]" in line for line in path.read_text(encoding="utf-8").splitlines())
              for module, path in MODULES.items()}
    return {module: n for module, n in counts.items() if n}


def test_dict_str_any_only_at_the_named_json_edges() -> None:
    counts = _dict_any_lines()
    wrong = {m: f"{counts.get(m, 0)} lines, {JSON_EDGES[m][0] if m in JSON_EDGES else 0} listed"
             for m in sorted(set(counts) | set(JSON_EDGES)) if counts.get(m, 0) != JSON_EDGES.get(m, (0, ""))[0]}
    assert not wrong, ("dict[str, Any] outside its listed JSON edges (type the value, or list the module with "
                       f"its edge in JSON_EDGES; a typed-away line lowers its count): {wrong}")


# Bare ``Any`` (issue 36) is confined the same way: every annotation of a module (a parameter's, a
# return's, an attribute's or variable's, a ``cast``'s, a TypeVar's bound or default) and every type alias
# (``Row = tuple[Any, ...]``) that names ``Any`` outside a ``dict[str, Any]`` (counted above) is
# one here, found with :mod:`ast` (a comment or a string that says Any is none).  ``Any`` belongs
# only where no type of ours can say more:
#
# - a JSON value as parsed, before it becomes a type (the named alias is ``records.typed.JsonValue``:
#   use it where a reader should see "JSON", it is not counted), a YAML document, a TOML table;
# - a SQL result cell (DuckDB hands back any Python scalar: int, Decimal, date, str, ...);
# - keyword arguments or options forwarded to a library (typer, pydantic, MetricFlow, Ray, vLLM)
#   and a decorator's pass-through (``*args: Any, **kwargs: Any``, ``Callable[..., Any]``);
# - a third-party object with no stubs (a MetricFlow manifest object, a Ray handle, a pyarrow file
#   system, a scikit-learn pipeline), named on its module's line;
# - a generic of ours with its parameter erased (``Condition[Any]`` in a registry of them all).
#
# Anything else is a domain type of ours (a Warehouse, a Catalog, a RuleSet, a case, a client):
# import it (down the layers), or declare a Protocol in the lower layer for one that lives above.
# The table is exact, as JSON_EDGES is: a new Any fails (type it, or list it with its edge), and so
# does a typed-away one (lower the count).  A line starting "not an edge yet" is a known type still to write.
# Measured: 477 annotations in 101 modules at 5f63a47; the sum of this table now.
JSON_VALUE = "a JSON value as parsed, before it becomes a type"
YAML = "a YAML document or node as parsed"
TOML = "a TOML table as parsed (a rule file)"
CELL = "a SQL result cell (DuckDB hands back any Python scalar)"
FORWARD = "keyword arguments or options forwarded to a library"
WRAPS = "a decorator's pass-through of the wrapped function's arguments and result"
DECORATED = ("a command's parameter a decorator fills (typer reads the signature at run time: the class would be "
             "imported at start-up)")
ERASED = "a generic of ours with its parameter erased (a registry of them all)"
MF = "a MetricFlow object read by its fields (its context classes told apart by attribute)"
RAY = "a Ray or Ray Data object (handles, datasets, batches: Ray types them Any)"
ARROW = "a pyarrow object (no stubs)"
SKLEARN = "a scikit-learn estimator or array (no stubs)"
#: Not an edge: a type of ours that is known, left for its module's own rework (named on the line).
TODO = "not an edge yet: "
ANY_EDGES: dict[str, tuple[int, str]] = {
    "nlq2sql.conditions.trace": (2, "a trace value as its field declares it (each trace class its own type)"),
    "nlq2sql.inputs": (1, f"{JSON_VALUE} (below records.typed.JsonValue)"),
    "nlq2sql.records.typed": (1, "JsonValue itself"),
    "nlq2sql.records.results": (1, f"{FORWARD} (a summary's added keys, to pydantic)"),
    "nlq2sql.semantic.yamlsafe": (2, YAML),
    "nlq2sql.semantic.project": (1, YAML),
    "nlq2sql.semantic.dbt_project": (1, YAML),
    "nlq2sql.semantic.manifest": (4, f"{MF}; MetricFlow's jsonschema validator and its referencing registry; "
                                     f"{FORWARD} (the parsed objects into PydanticSemanticManifest)"),
    "nlq2sql.semantic.mf": (1, "a MetricFlow object found among a failing frame's locals"),
    "nlq2sql.semantic.prune": (1, MF),
    "nlq2sql.semantic.binding": (4, f"{TODO}the DuckDB connection and the cache keys (the module is being rewritten)"),
    "nlq2sql.stages.execute": (1, CELL),
    "nlq2sql.stages.query_score": (2, CELL),
    "nlq2sql.stages.guardrail": (9, TOML),
    "nlq2sql.stages.intent": (1, f"{JSON_VALUE} (a raw answer as recorded, text or not)"),
    "nlq2sql.stages.learned_guardrail": (1, SKLEARN),
    "nlq2sql.stages.learned_training": (4, SKLEARN),
    "nlq2sql.stages.summary": (1, f"{TODO}the pending traces (the module is being rewritten)"),
    "nlq2sql.answers.kinds": (4, f"{ERASED}: a kind's case, of its case_type (each kind's scorer takes its own)"),
    "nlq2sql.answers.sql.equivalence": (12, CELL),
    "nlq2sql.answers.sql.gold": (1, CELL),
    "nlq2sql.answers.sql.sandbox": (1, CELL),
    "nlq2sql.answers.sql.score": (3, CELL),
    "nlq2sql.transport.client": (2, "httpx's Limits for the SDK's bundled httpx; the SDK's error, never imported"),
    "nlq2sql.transport.stream": (1, "either kind of client (transport.client.Client, which imports this module)"),
    "nlq2sql.conditions.example_bank": (3, f"{ERASED}: a bank's case, v1 or v2, by its writer; {SKLEARN}"),
    "nlq2sql.conditions.registry": (5, f"{FORWARD} (pydantic's create_model and __init_subclass__, raw CLI options); "
                                       "the pickle protocol's __reduce__"),
    "nlq2sql.run.batch": (6, RAY),
    "nlq2sql.run.batch_out": (2, ARROW),
    "nlq2sql.run.batch_shards": (5, f"{RAY}; {ARROW}"),
    "nlq2sql.run.batch_vllm": (1, RAY),
    "nlq2sql.run.ray_engine": (6, RAY),
    "nlq2sql.run.workers": (6, f"{RAY}; a worker's message as received; a multiprocessing Value; "
                               f"{TODO}the engine (local or Ray: a Protocol)"),
    "nlq2sql.run.worker": (1, "a shared counter: a multiprocessing Value or a Ray actor"),
    "nlq2sql.run.live": (1, f"{TODO}the eval set (AnySet: its cases reach workers typed EvalCase)"),
    "nlq2sql.run.context": (1, f"{FORWARD} (a context part's fields)"),
    "nlq2sql.run.presets": (1, "flat run spec values (options)"),
    "nlq2sql.run.spec": (2, "flat run spec values (options)"),
    "nlq2sql.load.driver": (9, f"{FORWARD} (pydantic's Field and settings); {ERASED} (modes, plots, "
                                "levels of a mode that declares none)"),
    "nlq2sql.load.modes": (4, f"{ERASED}; options"),
    "nlq2sql.load.results": (1, f"{ERASED} (any mode's result)"),
    "nlq2sql.load.tune": (1, f"{ERASED} (a ClassVar cannot hold the result's type variable)"),
    "nlq2sql.load.grid": (1, f"{FORWARD} (pydantic's model_post_init)"),
    "nlq2sql.load.serialization": (1, f"{FORWARD} (pydantic's model_post_init)"),
    "nlq2sql.load.slo": (3, f"{JSON_VALUE} (a field validator's input)"),
    "nlq2sql.load.probes": (1, f"{FORWARD} (a trial's measured fields)"),
    "nlq2sql.experiments.gate": (1, "raw CLI options"),
    "nlq2sql.cli._common": (10, f"{WRAPS}; {FORWARD} (typer, click)"),
    "nlq2sql.cli._spec": (9, f"{WRAPS}; {FORWARD} (typer's parameters and options)"),
    "nlq2sql.cli.main": (3, f"{DECORATED}; raw CLI options"),
    "nlq2sql.cli.batch": (1, DECORATED),
    "nlq2sql.cli.evalsets": (2, DECORATED),
    "nlq2sql.cli.experiments": (2, DECORATED),
    "nlq2sql.cli.load": (8, f"{DECORATED}; {WRAPS}; {ERASED}"),
    "nlq2sql.cli.semantic": (4, f"{DECORATED}; {CELL}"),
    "nlq2sql.cli.tune": (1, DECORATED),
}


def _is_any(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "Any") or (
        isinstance(node, ast.Attribute) and node.attr == "Any" and isinstance(node.value, ast.Name)
        and node.value.id == "typing")


def _names_any(expr: ast.expr) -> bool:
    """Whether a type expression names ``Any`` outside a ``dict[str, Any]`` (a quoted one parsed too)."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        try:
            return _names_any(ast.parse(expr.value, mode="eval").body)
        except SyntaxError:
            return False
    counted = {id(node.slice.elts[1]) for node in ast.walk(expr)
               if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "dict"
               and isinstance(node.slice, ast.Tuple) and len(node.slice.elts) == 2
               and isinstance(node.slice.elts[0], ast.Name) and node.slice.elts[0].id == "str"}
    return any((_is_any(node) and id(node) not in counted)
               or (isinstance(node, ast.Constant) and isinstance(node.value, str) and node is not expr
                   and _names_any(node))
               for node in ast.walk(expr))


def _type_expressions(tree: ast.Module) -> Iterator[ast.expr]:
    """Every annotation, ``cast`` type, TypeVar bound and type alias (module or class level) of a module."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg):
                if arg is not None and arg.annotation is not None:
                    yield arg.annotation
            if node.returns is not None:
                yield node.returns
        elif isinstance(node, ast.AnnAssign):
            yield node.annotation
            if isinstance(node.annotation, ast.Name) and node.annotation.id == "TypeAlias" and node.value:
                yield node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and (
                node.func.id == "cast" or node.func.id.endswith("TypeVar")):
            if node.func.id == "cast" and node.args:
                yield node.args[0]
            yield from (kw.value for kw in node.keywords if kw.arg in ("bound", "default"))
    for body in [tree.body] + [node.body for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]:
        for stmt in body:  # an alias: ``Name = <a type expression>``
            if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                    and (_is_any(stmt.value) or isinstance(stmt.value, ast.Subscript | ast.BinOp))):
                yield stmt.value


def _any_annotations(source: str) -> list[int]:
    """The line of each type expression of ``source`` that names a bare ``Any``."""
    return sorted(expr.lineno for expr in _type_expressions(ast.parse(source)) if _names_any(expr))


def test_the_any_walk_sees_annotations_and_aliases() -> None:
    source = ("from typing import Any, cast\nimport typing\nJson = Any\nRow = tuple[Any, ...]\nN = 3\n"
              "def f(a: Any, *b: int, **c: Any) -> dict[str, Any]: ...\n"
              "class C:\n    x: list[Any]\n    y: dict[str, Any]\n    z = 'Any'\n"
              "    def g(self) -> 'Mapping[str, Any]':\n        v: typing.Any = cast(Any, 1)\n"
              "T = TypeVar('T', bound=Callable[..., Any])\nM = dict[str, Any] | None\nD = TypeVar('D', default=Any)\n")
    # a, c (one line, two), x, g's return, v and its cast, T's bound, D's default; not the dict[str, Any]s, N or z
    assert _any_annotations(source) == [3, 4, 6, 6, 8, 11, 12, 12, 13, 15]


def _any_counts() -> dict[str, int]:
    counts = {module: len(_any_annotations(path.read_text(encoding="utf-8"))) for module, path in MODULES.items()}
    return {module: n for module, n in counts.items() if n}


def test_any_only_at_the_named_edges() -> None:
    counts = _any_counts()
    wrong = {m: f"{counts.get(m, 0)} annotations, {ANY_EDGES[m][0] if m in ANY_EDGES else 0} listed"
             for m in sorted(set(counts) | set(ANY_EDGES)) if counts.get(m, 0) != ANY_EDGES.get(m, (0, ""))[0]}
    assert not wrong, ("bare Any outside its listed edges (type it -- a class of ours, or a Protocol in the "
                       "lower layer -- or list the module with its edge in ANY_EDGES; a typed-away Any lowers "
                       f"its count): {wrong}")
