"""One aggregator, the same summaries: every committed run's records summarised as scored and as
unscored items (and re-scoring's shared adds, and ``batch``'s shard summary) give the JSON text
pinned in ``tests/fixtures/summary-golden.json``, captured from the two aggregators before they
became one.  The runs are the golden's, their records read as they were at the golden's commit
(``git cat-file``), so a report re-run or added later does not move it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from summary_cases import GOLDEN, cases


def test_every_summary_is_byte_identical_to_the_golden(tmp_path: Path) -> None:
    golden = json.loads(GOLDEN.read_text())
    pinned, full = golden["sha256"], golden["full"]
    runs = sorted({name.rsplit(":", 1)[0] for name in pinned})
    seen: list[str] = []
    for name, text in cases(tmp_path, runs, golden["commit"]):
        seen.append(name)
        assert name in pinned, f"{name}: not in the golden"
        if name.endswith(":records"):
            assert text == pinned[name], f"{name}: not the records the golden was captured from"
            continue
        if name in full:
            assert text == full[name], name
        assert hashlib.sha256(text.encode()).hexdigest() == pinned[name], name
    assert sorted(seen) == sorted(pinned), "a pinned run is no longer there"
    assert len(seen) > 1000 and any(":shards-unscored" in n for n in seen)
