"""The ``/metrics`` sampler's parse cost per scrape, side by side with the full Prometheus parser.

The sampler scrapes four times a second for the whole run, so its per-page CPU is the
harness's standing cost on the client's core (on a CPU server, on the engine's cores too).
Both parsers read the same real CPU vLLM 0.32 page (``tests/fixtures/``), alternating rounds.

    .venv/bin/python benchmarks/bench_metrics_parse.py [--rounds 5] [--pages 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from unit.transport.test_server_metrics import FIXTURE, reference  # noqa: E402

from nlq2sql.transport.server_metrics import parse_metrics  # noqa: E402


def cpu_ms(fn, text: str, pages: int) -> float:  # type: ignore[no-untyped-def]
    t = time.process_time()
    for _ in range(pages):
        fn(text)
    return (time.process_time() - t) / pages * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pages", type=int, default=50)
    a = ap.parse_args()
    text = FIXTURE.read_text()
    assert parse_metrics(text) == reference(text)
    full, line = [], []
    for _ in range(a.rounds):
        full.append(cpu_ms(reference, text, a.pages))
        line.append(cpu_ms(parse_metrics, text, a.pages))
    ratios = [f / x for f, x in zip(full, line, strict=True)]
    print(f"page: {len(text):,} bytes, {text.count(chr(10)):,} lines (real CPU vLLM 0.32 /metrics)")
    print(f"full Prometheus parser  {statistics.median(full):.2f} ms CPU per page (median of {a.rounds})")
    print(f"sampler's line parser   {statistics.median(line):.3f} ms CPU per page")
    print(f"ratio full / line       {statistics.median(ratios):.1f}x ({min(ratios):.1f}–{max(ratios):.1f})")
    print(f"at 4 scrapes/s: {4 * statistics.median(full):.0f} → {4 * statistics.median(line):.1f} ms CPU "
          "per second of run")


if __name__ == "__main__":
    main()
