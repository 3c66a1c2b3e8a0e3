"""KV math and context budget on known configs and synthetic records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nlq2sql.errors import InputError
from nlq2sql.load import capacity as cap
from nlq2sql.load.results import load_result
from nlq2sql.records.item import ItemRecord

SMOLLM2 = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
           "hidden_size": 576, "dtype": "bfloat16"}
QWEN25_3B = {"num_hidden_layers": 36, "num_attention_heads": 16, "num_key_value_heads": 2, "hidden_size": 2048,
             "torch_dtype": "bfloat16"}
METRICS = ('# TYPE vllm:cache_config_info gauge\n'
           'vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",num_gpu_blocks="2912"} 1.0\n')


def test_kv_per_token_smollm2_matches_vllm_log() -> None:
    kv = cap.kv_per_token(SMOLLM2)
    assert kv.bytes_per_token == 2 * 30 * 3 * 64 * 2 == 23040
    # vLLM logged "CPU KV cache size: 46,592 tokens" for a 1 GiB budget: 1 GiB / 23,040 B ≈ 46,603.
    assert 2**30 // kv.bytes_per_token == 46603
    assert cap.kv_per_token(SMOLLM2, "float32").bytes_per_token == 46080


def test_kv_per_token_gqa_and_hybrid_and_mla() -> None:
    # Seed 002's Qwen2.5-3B: two KV heads keep the cache small (36 KiB per token).
    assert cap.kv_per_token(QWEN25_3B).bytes_per_token == 2 * 36 * 2 * 128 * 2
    hybrid = dict(SMOLLM2, layer_types=["full_attention", "linear_attention"] * 15)
    assert cap.kv_per_token(hybrid).attention_layers == 15
    mla = {"num_hidden_layers": 2, "num_attention_heads": 8, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
           "torch_dtype": "bfloat16"}
    assert cap.kv_per_token(mla).bytes_per_token == 2 * (512 + 64) * 2
    with pytest.raises(InputError):
        cap.kv_per_token(dict(SMOLLM2, dtype="weird"))
    with pytest.raises(InputError):
        cap.kv_per_token({"hidden_size": 4})


def test_server_budget_from_metrics() -> None:
    b = cap.server_budget(METRICS)
    assert b.to_json() == {"observed": True, "blocks": 2912, "block_size": 16, "tokens": 46592, "cache_dtype": "auto"}
    assert cap.server_budget(None).observed is False
    assert cap.server_budget("# TYPE x gauge\nx 1\n").observed is False


def test_kv_need() -> None:
    n = cap.kv_need(23040, 32, 1000, 46592)
    assert n.tokens == 32000 and n.kv_can_limit is False and n.max_sequences_at_context == 46
    assert cap.kv_need(23040, 64, 1000, 46592).kv_can_limit is True


def _items(recs: list[dict]) -> list[dict]:
    """The records as a run writes them: each with an id and a question."""
    return [{"id": str(i), "question": "q", **r} for i, r in enumerate(recs)]


def _run(d: Path, recs: list[dict], kv_peak: float | None = 0.05, concurrency: int = 8) -> Path:
    d.mkdir(parents=True)
    (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _items(recs)))
    (d / "manifest.json").write_text(json.dumps({"concurrency": concurrency, "server": {"max_model_len": 2048}}))
    sm = {"observed": True, "kv_cache_usage": {"n": 12, "peak": kv_peak, "mean": 0.02}} if kv_peak else \
        {"observed": False}
    (d / "summary.json").write_text(json.dumps({"server_metrics": sm}))
    return d


def test_context_budget_and_analysis(tmp_path: Path) -> None:
    recs = [{"prompt_tokens": 300 + i, "completion_tokens": 40 + i, "finish_reason": "stop",
             "raw_intent": {"intent": "x"}, "outcome": "ok"} for i in range(10)]
    recs += [{"prompt_tokens": 320, "completion_tokens": 96, "finish_reason": "length", "raw_intent": None,
              "outcome": "ok"},
             {"prompt_tokens": None, "completion_tokens": None, "finish_reason": None, "raw_intent": None,
              "outcome": "context_overflow"}]
    d = _run(tmp_path / "r", recs)
    ctx = cap.context_budget([ItemRecord.from_json(r) for r in _items(recs)], 2048)
    assert ctx.valid_osl.max == 49 and ctx.recommended_max_tokens == 64  # 49 × 1.25 = 61.25 → 64
    assert ctx.finish_length == 1 and ctx.context_overflow == 1
    assert ctx.headroom_tokens == 2048 - (320 + 64) and ctx.isl.n == 11
    r = cap.analyse(SMOLLM2, [d], metrics_text=METRICS)
    assert r.need is not None and r.need.concurrency == 8 and r.need.context_tokens == 320 + 64
    assert r.verdict and "KV cannot be what limits the batch at c=8" in r.verdict and "5.0% (c=8, n=12" in r.verdict
    md = cap.render_markdown(r)
    assert "23,040 B" in md and "46,592 tokens" in md and "Recommended max_tokens: **64**" in md
    r = cap.analyse(SMOLLM2, [d])
    assert "not observed" in cap.render_markdown(r)
    assert cap.context_budget([ItemRecord.from_json(r) for r in _items(recs[-2:])], None).recommended_max_tokens is None


def test_capacity_cli(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from nlq2sql.cli.main import app

    recs = [{"prompt_tokens": 300, "completion_tokens": 40, "finish_reason": "stop", "raw_intent": {"i": 1},
             "outcome": "ok"}]
    d = _run(tmp_path / "r", recs)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(QWEN25_3B))
    res = CliRunner().invoke(app, ["capacity", "--run", str(d), "--model-config", str(cfg), "--concurrency", "32",
                                   "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    out = json.loads((tmp_path / "o" / "capacity.json").read_text())
    assert out["kv"]["bytes_per_token"] == 36864 and out["need"]["concurrency"] == 32
    assert out["budget"]["observed"] is False
    bad = CliRunner().invoke(app, ["capacity", "--run", str(tmp_path), "--model-config", str(cfg)])
    assert bad.exit_code == 2


MLA = {"num_hidden_layers": 2, "num_attention_heads": 8, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
       "torch_dtype": "bfloat16"}


@pytest.mark.parametrize("config, heads, head_dim", [(MLA, None, None), (SMOLLM2, 3, 64)])
def test_capacity_is_written_for_mla_and_dense_models(tmp_path: Path, config: dict, heads: int | None,
                                                      head_dim: int | None) -> None:
    """An MLA model (kv_lora_rank) has no KV heads nor head dim: the result says None, and is written
    (it used to fail the contract's int fields before anything was written)."""
    from typer.testing import CliRunner

    from nlq2sql.cli.main import app

    recs = [{"prompt_tokens": 300, "completion_tokens": 40, "finish_reason": "stop", "raw_intent": {"i": 1},
             "outcome": "ok"}]
    d = _run(tmp_path / "r", recs)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(config))
    res = CliRunner().invoke(app, ["capacity", "--run", str(d), "--model-config", str(cfg), "--out",
                                   str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    out = json.loads((tmp_path / "o" / "capacity.json").read_text())
    assert out["kv"]["kv_heads"] == heads and out["kv"]["head_dim"] == head_dim
    assert out["kv"]["bytes_per_token"] == cap.kv_per_token(config).bytes_per_token
    md = (tmp_path / "o" / "capacity.md").read_text()
    assert ("× (512 + 64) × 2 B" in md) == (heads is None) and ("3 KV heads" in md) == (heads is not None)
    assert load_result(tmp_path / "o" / "capacity.json").kv.kv_heads == heads  # and it reads back
