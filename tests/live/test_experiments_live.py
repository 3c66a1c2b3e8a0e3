"""The seed's experiments as commands, end to end on the real local vLLM (small item counts)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.records.store import iter_records
from nlq2sql.run.server import LocalServer

runner = CliRunner()


def _ep(srv: LocalServer) -> list[str]:
    return ["--endpoint", srv.url, "--model", srv.model_name]


def test_load_check_matrix_and_compare_live(vllm_server: LocalServer, tmp_path: Path) -> None:
    lc = tmp_path / "lc"
    res = runner.invoke(app, ["load-check", "--evalset", "heldout", "--limit", "4", "--concurrency", "1,4",
                              "--max-tokens", "96", "--allow-diff", "--out", str(lc), *_ep(vllm_server)])
    assert res.exit_code == 0, res.output
    data = json.loads((lc / "loadcheck.json").read_text())
    assert data["items"] == 4 and 0 <= data["identical_items"] <= 4
    assert len(data["divergent"]) == 4 - data["identical_items"]
    assert [r["concurrency"] for r in data["runs"]] == [1, 4] and all(r["n"] == 4 for r in data["runs"])

    mx = tmp_path / "mx"
    res = runner.invoke(app, ["matrix", "--evalset", "adversarial", "--limit", "4", "--concurrency", "4",
                              "--prompts", "baseline,contrastive", "--guardrails", "none,ranking",
                              "--out", str(mx), *_ep(vllm_server)])
    assert res.exit_code == 0, res.output
    table = json.loads((mx / "matrix.json").read_text())
    assert len(table["conditions"]) == 4 and all(c["summary"]["n"] == 4 for c in table["conditions"])
    for prompt in ("baseline", "contrastive"):  # one model call per (prompt, item)
        recs = list(iter_records(mx / f"adversarial-{prompt}" / "records.jsonl"))
        assert len(recs) == 4 and all(r["outcome"] == "ok" for r in recs)
    assert len(table["pairs"]) >= 1 and "McNemar" in (mx / "matrix.md").read_text()

    rep = tmp_path / "rep"
    res = runner.invoke(app, ["compare", str(mx / "adversarial-baseline"), str(lc / "c1-r0"), str(lc / "c4-r0"),
                              "--out", str(rep), "--gpu-cost-per-hour", "1.0"])
    assert res.exit_code == 0, res.output
    html = (rep / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 3 and "<img src=\"http" not in html
    assert "c=4" in (rep / "report.md").read_text() or "| 4 |" in (rep / "report.md").read_text()


def test_compact_live(vllm_server: LocalServer, tmp_path: Path) -> None:
    out = tmp_path / "cx"
    res = runner.invoke(app, ["compact", "--evalset", "heldout", "--limit", "3", "--concurrency", "3",
                              "--out", str(out), *_ep(vllm_server)])
    assert res.exit_code == 0, res.output
    data = json.loads((out / "compact.json").read_text())
    arms = data["arms"]
    assert {"pretty", "prompt-compact", "grammar-compact", "post-parse-compact"} <= set(arms)
    # The grammar arm cannot emit whitespace outside strings: verified on the bytes.
    recs = list(iter_records(out / "grammar-compact" / "records.jsonl"))
    assert len(recs) == 3 and all(r["whitespace_chars"] == 0 for r in recs if r["raw_text"] is not None)
    # Re-tokenisation through the server's /tokenize answered for every output.
    assert arms["grammar-compact"]["retokenized"]["n"] == 3
    c = data["comparisons"]["grammar-compact"]
    assert c["honoured"] + c["ignored"] + c["backfired"] == 3
