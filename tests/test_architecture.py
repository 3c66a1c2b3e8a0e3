"""The package layout is the architecture: imports go down the layers, never in a circle.

Every module under ``nlq2sql/`` is parsed with :mod:`ast`; module-level AND function-level
imports count (a function-level import only hides a cycle until the function runs), imports
under ``if TYPE_CHECKING:`` do not (they never execute).  The layer order is the one in
``docs/layout.md``; a package may import itself, and a module may import any lower layer.
The same walk checks the size limit and ``__all__`` on every public module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parent.parent / "nlq2sql"

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
MAX_LINES = 400


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


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that can execute (anywhere but an ``if TYPE_CHECKING:`` body)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _targets(module: str, path: Path) -> set[str]:
    """The nlq2sql modules ``module`` imports (a ``from pkg import sub`` names ``pkg.sub``)."""
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "nlq2sql")
            continue
        if node.level:
            base = module.split(".") if is_pkg else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        if source.split(".")[0] != "nlq2sql":
            continue
        for alias in node.names:
            sub = f"{source}.{alias.name}"
            out.add(sub if sub in MODULES else source)
    out.discard(module)
    return {t for t in out if t in MODULES}


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


def test_no_import_cycle() -> None:
    cycles = _cycles(GRAPH)
    assert not cycles, "import cycles inside nlq2sql/:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_imports_go_down_the_layers() -> None:
    upward = [
        f"{src} ({LAYERS[_layer(src)] or 'ground'}) imports {dst} ({LAYERS[_layer(dst)] or 'ground'})"
        for src, targets in sorted(GRAPH.items())
        for dst in sorted(targets)
        if _layer(dst) > _layer(src)
    ]
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_no_module_over_the_size_limit() -> None:
    big = {m: n for m, p in MODULES.items() if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines: {big}"


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


# A ratchet on ``dict[str, Any]`` (lines naming it, per package): lower a budget when a package
# drops below it, never raise one.  Issue 24 confines the untyped dict to the JSON edges; what is
# left, package by package (docs/layout.md, "Types and JSON edges"):
# - ground: a JSON object just read (``inputs.json_object``), git facts (``env_info``);
# - records: the writers' dumps (``to_json_dict``/``written`` and the key-order serialisers of the
#   summary, manifest and batch parts), record lines read and written by ``store``, a manifest just
#   read (``manifest_warehouse``, ``validated``);
# - semantic: JSON Schema documents (``contract``), dbt YAML as parsed (``project``, ``manifest``);
# - stages: JSON Schemas (``intent``), intent dumps (guardrail interventions, rule scopes, value
#   links, rescoring's flat templates), a TOML table just read, ``wilson``/``percentiles`` as JSON
#   views for report JSON, ``abstention`` on the flat record (its decision is stored in it);
# - answers: the answer kinds' query dumps and the flat record their rescoring template reads;
# - transport: HTTP bodies (``client``, ``rawclient``, ``stream``);
# - conditions: the per-item trace (record keys, JSON by nature), the planner's schema branches;
# - run: records crossing processes as lines (worker, Ray, batch shards), vLLM/Ray Data rows and
#   engine kwargs, the canary's JSON Schema, a manifest passed as written; still to type: the pool's
#   event and attempt logs, the batch manifest, ``bound_endpoint``'s facts;
# - load: dumps, ``/metrics`` text parsed, HTTP bodies, a model's ``config.json``, ``job.json``;
# - experiments: a JSON Schema, a manifest just read, the matrix's summary as written;
# - view: record lines and run files read tolerantly, the page's data (``meta.js``).
# Measured at the start of the work (b3049e0): 483 lines in all; 436 at 6a2b2ab; 195 at this budget.
DICT_ANY_BUDGET = {
    "": 3, "records": 20, "semantic": 16, "stages": 50, "answers": 5, "transport": 11, "conditions": 18,
    "run": 27, "load": 29, "experiments": 4, "view": 9, "cli": 3,
}


def _dict_any_lines() -> dict[str, int]:
    counts = dict.fromkeys(LAYERS, 0)
    for module, path in MODULES.items():
        n = sum("dict[str, Any]" in line for line in path.read_text(encoding="utf-8").splitlines())
        counts[LAYERS[_layer(module)]] += n
    return counts


def test_dict_str_any_stays_within_each_packages_budget() -> None:
    counts = _dict_any_lines()
    assert set(DICT_ANY_BUDGET) == set(LAYERS)
    over = {pkg or "ground": f"{n} > {DICT_ANY_BUDGET[pkg]}" for pkg, n in counts.items() if n > DICT_ANY_BUDGET[pkg]}
    assert not over, ("dict[str, Any] over its package's budget (type the value, or it is a JSON edge: "
                      f"see the comment above DICT_ANY_BUDGET): {over}")
    assert sum(counts.values()) > 100  # the count sees the package
