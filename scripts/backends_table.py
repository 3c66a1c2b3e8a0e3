"""Render reports/backends/README.md from the run records of ``nlq2sql backends`` (each backend's
figures recomputed from its records; a backend that did not run is read from backends.json).

    python scripts/backends_table.py reports/backends > reports/backends/README.md
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from nlq2sql.experiments.backends import BackendRow, render_markdown, summarise_backends
from nlq2sql.records.store import MANIFEST, read_json


def main(root: Path) -> None:
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                          check=False).stdout.strip() or "?"
    print("# Structured-output backends side by side\n")
    print(f"Rendered by `scripts/backends_table.py` at commit {head} from the records below (`nlq2sql "
          "backends`: one local CPU vLLM 0.32 per backend, one after another, the same items each, "
          "temperature 0, concurrency 1). CPU timings rank backends on this 2-core machine, shared with "
          "other work while they ran; they are not GPU figures.\n")
    for exp in sorted(p.parent for p in root.glob("*/backends.json")):
        saved = read_json(exp / "backends.json")
        names = tuple(r["backend"] for r in saved["backends"])
        errors = {r["backend"]: r["error"] for r in saved["backends"] if "error" in r}
        result = summarise_backends(exp, names, errors)
        ran = [r for r in result.backends if isinstance(r, BackendRow)]
        m = read_json(exp / ran[0].run / MANIFEST) if ran else {}
        compact = any(r.whitespace_free for r in ran)
        print(f"## {exp.name}\n")
        print(f"Model {m.get('model', '?')}, eval set {m.get('evalset', '?')} ({ran[0].n if ran else 0} items "
              f"per backend), max_tokens {(m.get('sampling') or {}).get('max_tokens')}, "
              f"{'whitespace-free grammar' if compact else 'whitespace allowed (vLLM default)'}; runs at commit "
              f"{str(m.get('git_commit') or '?')[:12]} (dirty: {m.get('git_dirty')}).\n")
        print(render_markdown(result))
    print("JSON-schema-valid: the raw reply parses and validates against the JSON Schema that was sent "
          "(`jsonschema`), over all items; harness schema-valid: the harness's own check (schema and the "
          "semantic layer's rules). First-request compile: the first item's TTFT minus the median TTFT of the "
          "others (the canary compiled its own small grammar before it). The canary's verdict is recorded in "
          "each run's manifest.")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "reports/backends"))
