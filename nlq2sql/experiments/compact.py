"""Compact vs pretty output: does whitespace-free JSON really save decode time?

Arms on the same items: **pretty**, **prompt-compact** (asked, not enforced), **grammar-compact**
(a whitespace-free regex from the schema) and **post-parse compact** (pretty re-serialised).
Compactness is verified on the bytes; token counts are set beside the same text re-tokenised by the
server (``/tokenize``), as constrained decoding can fragment tokens and make "compact" cost *more*."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

from nlq2sql.records.item import ItemRecord
from nlq2sql.records.rundir import RunDir
from nlq2sql.records.store import output_dir, write_json_atomic
from nlq2sql.records.summary_parts import Percentiles
from nlq2sql.records.typed import Num, Typed
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.item import whitespace_outside_strings
from nlq2sql.run.live import run_eval
from nlq2sql.semantic import load_catalog
from nlq2sql.stages.intent import compact_regex
from nlq2sql.stages.score import spread
from nlq2sql.transport.client import Sampling

__all__ = ["ARMS", "ArmFigures", "Comparison", "CompactConfig", "CompactResult", "analyse", "arm_config",
           "render_markdown", "retokenize", "run", "write_result"]

ARMS = ("pretty", "prompt-compact", "grammar-compact")


@dataclass(frozen=True)
class CompactConfig:
    base: EvalConfig  # must carry an endpoint; each arm gets its own run directory
    arms: tuple[str, ...] = ARMS


def arm_config(base: EvalConfig, arm: str) -> EvalConfig:
    out = base.out / arm
    if arm == "pretty":
        return replace(base, style="pretty", out=out, force=True)
    if arm == "prompt-compact":
        return replace(base, style="compact", out=out, force=True)
    if arm == "grammar-compact":
        sampling = Sampling(**{**base.sampling.recorded().to_json(), "structured": "regex",
                               "regex": compact_regex(load_catalog(base.semantic_model), base.sampling.schema)})
        return replace(base, style="compact", sampling=sampling, out=out, force=True)
    raise ValueError(f"unknown arm {arm}")


def retokenize(base_url: str, model: str, texts: list[str]) -> list[int | None]:
    """Token count of each text under the server's tokenizer; None where not available."""
    root = base_url.rstrip("/").removesuffix("/v1")
    out: list[int | None] = []
    with httpx.Client(timeout=30) as http:
        for t in texts:
            try:
                r = http.post(f"{root}/tokenize", json={"model": model, "prompt": t,
                                                       "add_special_tokens": False})
                out.append(int(r.json()["count"]) if r.status_code == 200 else None)
            except (httpx.HTTPError, KeyError, ValueError):
                out.append(None)
    return out


# ``compact.json`` as built.

class ArmFigures(Typed):
    """One arm's figures; the post-parse arm (no decode of its own) has only ``n``, ``chars`` and ``note``."""

    n: int
    completion_tokens: Percentiles | None = None
    completion_tokens_median: Num | None = None
    chars: Percentiles
    latency_s: Percentiles | None = None
    itl_mean_s: Percentiles | None = None
    schema_valid: int | None = None
    no_whitespace: int | None = None
    tokens_per_char: float | None = None
    retokenized: Percentiles | None = None
    generated_over_retokenized: float | None = None
    note: str | None = None


class Comparison(Typed):
    """A compact arm against pretty, item by item and in mean tokens and latency."""

    honoured: int
    ignored: int
    backfired: int
    tokens_saved_mean: Num | None
    predicted_saving_s: Num | None
    measured_saving_s: Num | None
    itl_used_s: Num | None


class CompactResult(Typed):
    arms: dict[str, ArmFigures]
    comparisons: dict[str, Comparison]


def _mean(p: Percentiles | None) -> Num | None:
    return p.mean if isinstance(p, Percentiles) else None


def _arm_stats(recs: list[ItemRecord], retok: list[int | None]) -> ArmFigures:
    toks = [t for r in recs if (t := r.request.completion_tokens) is not None]
    texts = [s for r in recs if (s := r.answer.raw_text) is not None]
    chars = [len(t) for t in texts]
    pairs = [(t, n) for r, n in zip(recs, retok, strict=True) if n and (t := r.request.completion_tokens)]
    return ArmFigures(
        n=len(recs),
        completion_tokens=spread([float(t) for t in toks]),
        completion_tokens_median=statistics.median(toks) if toks else None,
        chars=spread([float(c) for c in chars]),
        latency_s=spread([v for r in recs if (v := r.request.latency_s) is not None]),
        itl_mean_s=spread([v for r in recs if (v := r.request.itl_mean_s) is not None]),
        schema_valid=sum(r.answer.raw_intent is not None for r in recs),
        no_whitespace=sum(1 for t in texts if whitespace_outside_strings(t) == 0),
        tokens_per_char=(sum(toks) / sum(chars)) if chars and toks else None,
        retokenized=spread([float(n) for n in retok if n is not None]),
        generated_over_retokenized=(sum(a for a, _ in pairs) / sum(b for _, b in pairs)) if pairs else None,
    )


def analyse(dirs: dict[str, Path], base_url: str | None, model: str) -> CompactResult:
    """Per-arm statistics, post-parse arm, honoured/ignored/backfired and predicted savings."""
    recs = {arm: list(RunDir(d).records()) for arm, d in dirs.items()}
    arms: dict[str, ArmFigures] = {}
    for arm, rs in recs.items():
        texts = [r.answer.raw_text or "" for r in rs]
        retok: list[int | None] = retokenize(base_url, model, texts) if base_url else [None] * len(texts)
        arms[arm] = _arm_stats(rs, retok)
    if "pretty" in recs:
        post = []
        for text in (r.answer.raw_text for r in recs["pretty"]):
            try:
                if text is not None:
                    post.append(json.dumps(json.loads(text), separators=(",", ":")))
            except ValueError:
                continue
        arms["post-parse-compact"] = ArmFigures(n=len(post), chars=spread([float(len(p)) for p in post]),
                                                note="re-serialised pretty output: fewer bytes, same decode time")
    result = CompactResult(arms=arms, comparisons={})
    pretty = {r.id: r for r in recs.get("pretty", [])}
    itl = _mean(arms["pretty"].itl_mean_s) if "pretty" in arms else None
    for arm in ("prompt-compact", "grammar-compact"):
        if arm not in recs or not pretty:
            continue
        honoured = ignored = backfired = 0
        for r in recs[arm]:
            p = pretty.get(r.id)
            mine = r.request.completion_tokens
            theirs = p.request.completion_tokens if p else None
            if not p or mine is None or theirs is None:
                continue
            text = r.answer.raw_text
            if mine > theirs:
                backfired += 1
            elif text is not None and whitespace_outside_strings(text) == 0 and mine < theirs:
                honoured += 1
            else:
                ignored += 1
        pt, at = _mean(arms["pretty"].completion_tokens), _mean(arms[arm].completion_tokens)
        pl, al = _mean(arms["pretty"].latency_s), _mean(arms[arm].latency_s)
        saved = (pt - at) if pt is not None and at is not None else None
        result.comparisons[arm] = Comparison(
            honoured=honoured, ignored=ignored, backfired=backfired, tokens_saved_mean=saved,
            predicted_saving_s=saved * itl if saved is not None and itl else None,
            measured_saving_s=(pl - al) if pl is not None and al is not None else None,
            itl_used_s=itl)
    return result


def run(cfg: CompactConfig) -> CompactResult:
    dirs = {}
    for arm in cfg.arms:
        acfg = arm_config(cfg.base, arm)
        run_eval(acfg)
        dirs[arm] = acfg.out
    return analyse(dirs, cfg.base.endpoint, cfg.base.model)


def render_markdown(res: CompactResult) -> str:
    """The report, from the typed result (a written one is read into it first: ``CompactResult.from_json``)."""

    def f(d: Percentiles | None, k: str = "mean", fmt: str = "{:.1f}") -> str:
        v = getattr(d, k) if isinstance(d, Percentiles) else None
        return fmt.format(v) if v is not None else "n/a"
    lines = ["## Compact vs pretty", "",
             "| arm | n | completion tokens mean / median | re-tokenised mean | generated ÷ re-tokenised | "
             "chars mean | tokens/char | latency p50 / p95 | schema-valid | no whitespace |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for arm, a in res.arms.items():
        if arm == "post-parse-compact":
            lines.append(f"| {arm} | {a.n} | (no decode) | | | {f(a.chars)} | | (same as pretty) | | {a.n} |")
            continue
        gr = f"{a.generated_over_retokenized:.2f}" if a.generated_over_retokenized else "n/a"
        tpc = f"{a.tokens_per_char:.3f}" if a.tokens_per_char else "n/a"
        lines.append(f"| {arm} | {a.n} | {f(a.completion_tokens)} / {a.completion_tokens_median} | "
                     f"{f(a.retokenized)} | {gr} | {f(a.chars)} | {tpc} | "
                     f"{f(a.latency_s, 'p50', '{:.3f}')} / {f(a.latency_s, 'p95', '{:.3f}')} s | "
                     f"{a.schema_valid}/{a.n} | {a.no_whitespace}/{a.n} |")
    lines += ["", "| arm vs pretty | honoured | ignored | backfired | tokens saved (mean) | predicted saving "
              "| measured saving |", "|---|---|---|---|---|---|---|"]
    for arm, c in res.comparisons.items():
        def s(v: float | None, unit: str = "") -> str:
            return f"{v:.3f}{unit}" if v is not None else "n/a"
        lines.append(f"| {arm} | {c.honoured} | {c.ignored} | {c.backfired} | "
                     f"{s(c.tokens_saved_mean)} | {s(c.predicted_saving_s, ' s')} | "
                     f"{s(c.measured_saving_s, ' s')} |")
    lines.append("\nA negative saving means the arm cost more than pretty: shown, not averaged away.")
    return "\n".join(lines) + "\n"


def write_result(out: Path, res: CompactResult) -> None:
    output_dir(out)
    write_json_atomic(out / "compact.json", res.to_json())
    (out / "compact.md").write_text(render_markdown(res))
