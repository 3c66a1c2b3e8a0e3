"""Start-up budget: whole ``nlq2sql`` commands as processes, this tree side by side with a baseline.

Times ``nlq2sql --help`` and ``nlq2sql sql --intent '{...}'`` (retail, a simple query) as a
user runs them: a fresh interpreter each time (``python -m nlq2sql.cli`` in the tree, so the
tree's own package is imported), wall time from start to exit.  The baseline is another
checkout of the project: ``--baseline REV`` adds a temporary git worktree of REV and removes it
afterwards (``--baseline-dir DIR``: an existing checkout).  Both trees run in the same rounds,
alternating, after one untimed warm-up each (byte-compiling a fresh checkout, building the
warehouse if the cache has none), on the same cache (``$NLQ2SQL_CACHE_DIR``); a round's ratio
is baseline / this tree, and the printed ratio is the median of the rounds'.  The targets
(``--help`` ≤ 0.35 s, ``sql --intent`` ≤ 1.0 s) are judged on this tree's median.  On a
loaded machine the figures move with the load: compare only the ratio of one run.  ``--also
'ARGS'`` times more commands the same way (a command's own ``--help`` imports its module: what
moving imports to module level costs), with no target.

    .venv/bin/python benchmarks/bench_startup.py --baseline REV [--rounds 7] [--also 'eval --help' ...]
    .venv/bin/python benchmarks/bench_startup.py --baseline HEAD --smoke   # one round
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: (label, arguments after ``python -m nlq2sql.cli``, target in seconds)
COMMANDS: tuple[tuple[str, tuple[str, ...], float | None], ...] = (
    ("nlq2sql --help", ("--help",), 0.35),
    ("nlq2sql sql --intent", ("sql", "--intent", '{"metrics": ["revenue"], "group_by": ["metric_time__year"]}',
                              "--semantic-model", "retail"), 1.0),
)


def run_once(tree: Path, args: tuple[str, ...], env: dict[str, str]) -> float:
    """Wall seconds of one ``python -m nlq2sql.cli ARGS`` in ``tree``; a failure stops the benchmark."""
    t = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "nlq2sql.cli", *args], cwd=tree, env={**env, "PYTHONPATH": str(tree)},
                         capture_output=True, text=True)
    elapsed = time.perf_counter() - t
    if res.returncode != 0:
        raise SystemExit(f"{tree}: nlq2sql {' '.join(args)} exited {res.returncode}:\n{res.stderr[-2000:]}")
    return elapsed


@contextmanager
def checkout(rev: str | None, directory: Path | None) -> Iterator[tuple[Path, str]]:
    """The baseline tree and its label: ``directory`` as it is, or a temporary worktree of ``rev``."""
    if directory is not None:
        yield directory.resolve(), str(directory)
        return
    assert rev is not None
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", f"{rev}^{{commit}}"], check=True,
                         capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        tree = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), sha], check=True,
                       capture_output=True)
        try:
            yield tree, f"{rev} ({sha})" if rev != sha else sha
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--baseline", help="git revision to compare with (a temporary worktree of it)")
    where.add_argument("--baseline-dir", type=Path, help="an existing checkout to compare with")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--smoke", action="store_true", help="one round (checks that the benchmark runs)")
    ap.add_argument("--also", action="append", default=[], metavar="ARGS",
                    help="another command line to time (shell words, e.g. 'eval --help'); no target")
    a = ap.parse_args()
    rounds = 1 if a.smoke else a.rounds
    commands = COMMANDS + tuple((f"nlq2sql {line}", tuple(shlex.split(line)), None) for line in a.also)
    sys.path.insert(0, str(ROOT))
    from nlq2sql.paths import cache_dir

    env = {**os.environ, "NLQ2SQL_CACHE_DIR": str(cache_dir().resolve()), "COLUMNS": "80"}
    with checkout(a.baseline, a.baseline_dir) as (base, label):
        trees = {"baseline": base, "this": ROOT}
        times: dict[tuple[str, str], list[float]] = {}
        for _, args, _ in commands:  # warm-up: byte-compile, build the warehouse if the cache has none
            for tree in trees.values():
                run_once(tree, args, env)
        for r in range(rounds):
            for name, args, _ in commands:
                order = list(trees.items()) if r % 2 == 0 else list(reversed(trees.items()))
                for which, tree in order:
                    times.setdefault((name, which), []).append(run_once(tree, args, env))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"start-up, wall seconds per process (min / median of {rounds} round(s), the two trees alternating; "
          f"load average {load:.1f} on {os.cpu_count()} CPUs)")
    print(f"baseline: {label}; this tree: {ROOT.name}")
    print("")
    print("| command | baseline | this tree | ratio baseline / this | target | met |")
    print("|---|---|---|---|---|---|")
    for name, _, target in commands:
        base_t, this_t = times[(name, "baseline")], times[(name, "this")]
        ratio = statistics.median(b / t for b, t in zip(base_t, this_t, strict=True))
        med = statistics.median(this_t)
        judged = ("—", "—") if target is None else (f"≤ {target:g} s", "yes" if med <= target else "no")
        print(f"| {name} | {min(base_t):.3f} / {statistics.median(base_t):.3f} | {min(this_t):.3f} / {med:.3f} | "
              f"{ratio:.2f}x | {judged[0]} | {judged[1]} |")


if __name__ == "__main__":
    main()
