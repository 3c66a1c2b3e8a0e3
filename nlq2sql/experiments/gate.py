"""A regression gate for CI: is a candidate run worse than a baseline run of the same eval set?

Runs are read from their records and compared **item by item on the ids they share**. Checks
(exact semantics in ``docs/gate.md``): ``coverage`` (candidate lacks baseline items; extras never
fail); ``accuracy_mcnemar`` (one-sided exact McNemar, b = right → wrong, p = P(X ≥ b), X ~ Binomial(b + c, ½), fails
when p < alpha); ``accuracy_drop`` (percentage points; equal to ``max_drop`` passes, compared exactly
as fractions of the decimal written); ``schema_valid`` (any decrease); ``new_error_classes`` (an
``error_final`` class the baseline lacks); ``p95_latency`` (measured only when both runs have latency
for ≥ 5 items, judged only with ``max_p95_rise``; equal passes); ``byte_identity`` (``raw_text`` per
item, judged only with ``require_identical``).
Refused (:class:`~nlq2sql.errors.InputError`, exit 2), naming the field and both values: different
eval sets (``evalset_sha256``) or warehouses (:mod:`nlq2sql.experiments.identity`); records not
matching their summary (count or SHA-256), without an id or final correctness, with duplicate ids;
runs with no item in common. Outputs: :mod:`nlq2sql.experiments.gate_report`."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError

from nlq2sql.errors import InputError
from nlq2sql.experiments.gate_inputs import RunFacts, check_same_inputs, read_run
from nlq2sql.records.typed import Typed
from nlq2sql.stages.score import spread

__all__ = ["Check", "Flip", "GateConfig", "GateResult", "ItemResult", "RunInfo", "Status", "config_from_options",
           "run_gate"]

#: Fewest latency samples per run for a p95 the gate will judge.
MIN_LATENCY_N = 5
#: At most this many ids are listed in one line of the Markdown summary.
LIST_LIMIT = 100

Status = Literal["pass", "fail", "not measured", "not checked"]
Flip = Literal["right_to_wrong", "wrong_to_right", "both_right", "both_wrong"]


class GateConfig(Typed):
    """What to compare and the bounds; validated the same way for the CLI and library callers."""

    model_config = ConfigDict(frozen=True)

    baseline: Path
    candidate: Path
    max_drop: float = Field(default=5.0, ge=0, le=100, allow_inf_nan=False,
                            description="Largest allowed drop in final accuracy, percentage points "
                                        "(equal passes).")
    alpha: float = Field(default=0.05, gt=0, lt=1, allow_inf_nan=False,
                         description="Significance level of the one-sided exact McNemar test.")
    max_p95_rise: float | None = Field(default=None, ge=0, allow_inf_nan=False,
                                       description="Largest allowed p95 latency rise, percent "
                                                   "(equal passes); None: not judged.")
    require_identical: bool = Field(default=False, description="Fail when any paired item's raw_text changed.")


class RunInfo(Typed):
    model_config = ConfigDict(frozen=True)

    path: str
    kind: str | None
    model: str | None
    prompt: str | None
    guardrails: list[str]
    evalset: str | None
    evalset_sha256: str
    semantic_model: str | None
    n: int


class Check(Typed):
    model_config = ConfigDict(frozen=True)

    id: str
    title: str
    status: Status
    detail: str
    numbers: dict[str, float | int | str | None] = Field(default_factory=dict)


class ItemResult(Typed):
    model_config = ConfigDict(frozen=True)

    id: str
    question: str | None
    baseline_correct: bool
    candidate_correct: bool
    flip: Flip
    baseline_error: str | None
    candidate_error: str | None
    identical: bool


class GateResult(Typed):
    model_config = ConfigDict(frozen=True)

    verdict: Literal["pass", "fail"]
    config: GateConfig
    baseline: RunInfo
    candidate: RunInfo
    paired: int
    baseline_only: list[str]
    candidate_only: list[str]
    checks: list[Check]
    items: list[ItemResult]

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict == "pass" else 1

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    def flipped(self, flip: Flip) -> list[ItemResult]:
        return [i for i in self.items if i.flip == flip]


# -- reading ---------------------------------------------------------------------------------

def config_from_options(**options: Any) -> GateConfig:
    """A :class:`GateConfig` from command-line values; a bad value → InputError naming the option."""
    try:
        return GateConfig(**options)
    except ValidationError as exc:
        e = exc.errors()[0]
        name = str(e["loc"][0]) if e["loc"] else "option"
        raise InputError(f"{e['msg']}, got {e.get('input')!r}", field="--" + name.replace("_", "-")) from None


def _info(run_dir: Path, m: RunFacts, n: int) -> RunInfo:
    return RunInfo(path=str(run_dir), kind=m.kind, model=m.model, prompt=m.prompt, guardrails=m.guardrails,
                   evalset=m.evalset, evalset_sha256=str(m.evalset_sha256), semantic_model=m.semantic_model, n=n)


# -- checks ----------------------------------------------------------------------------------

def _exact(x: float) -> Fraction:
    """The decimal a user wrote (``5``, ``0.3``) as an exact fraction: repr gives it back."""
    return Fraction(repr(float(x)))


def _pp(k: int, n: int) -> str:
    return f"{100 * k / n:.1f} %" if n else "n/a"


def _mcnemar(b: int, c: int, alpha: float) -> Check:
    from scipy.stats import binomtest  # (scipy.stats: 0.7 s, paid by the gate's run only, never its --help)

    p = 1.0 if b + c == 0 else float(binomtest(b, b + c, 0.5, alternative="greater").pvalue)
    status: Status = "fail" if p < alpha else "pass"
    return Check(id="accuracy_mcnemar", title="final accuracy: one-sided exact McNemar",
                 status=status,
                 detail=f"{b} item(s) right → wrong, {c} wrong → right; one-sided p = {p:.4g} "
                        f"({'<' if p < alpha else '≥'} alpha {alpha:g})",
                 numbers={"right_to_wrong": b, "wrong_to_right": c, "p_one_sided": p, "alpha": alpha})


def _drop(base_k: int, cand_k: int, n: int, max_drop: float) -> Check:
    drop = Fraction(100 * (base_k - cand_k), n)
    limit = _exact(max_drop)
    status: Status = "fail" if drop > limit else "pass"
    rel = ">" if drop > limit else "=" if drop == limit else "<"
    return Check(id="accuracy_drop", title="final accuracy: drop bound",
                 status=status,
                 detail=f"baseline {_pp(base_k, n)} ({base_k}/{n}), candidate {_pp(cand_k, n)} "
                        f"({cand_k}/{n}): drop {float(drop):.2f} pp {rel} max {max_drop:g} pp "
                        "(a drop equal to the bound passes)",
                 numbers={"baseline_correct": base_k, "candidate_correct": cand_k, "paired": n,
                          "drop_pp": float(drop), "max_drop_pp": max_drop})


def _schema_valid(base_v: int, cand_v: int, n: int) -> Check:
    status: Status = "fail" if cand_v < base_v else "pass"
    return Check(id="schema_valid", title="schema-valid rate",
                 status=status,
                 detail=f"baseline {_pp(base_v, n)} ({base_v}/{n}), candidate {_pp(cand_v, n)} "
                        f"({cand_v}/{n}); any decrease fails",
                 numbers={"baseline_valid": base_v, "candidate_valid": cand_v, "paired": n})


def _error_classes(base: dict[str, int], cand: dict[str, int]) -> Check:
    new = sorted(k for k in cand if k not in base)
    status: Status = "fail" if new else "pass"
    what = ", ".join(f"{k} ({cand[k]} item(s))" for k in new) if new else "none"
    fmt = ", ".join(f"{k} {v}" for k, v in sorted(base.items())) or "none"
    cfmt = ", ".join(f"{k} {v}" for k, v in sorted(cand.items())) or "none"
    return Check(id="new_error_classes", title="new error classes (final)",
                 status=status,
                 detail=f"new in the candidate: {what}; baseline: {fmt}; candidate: {cfmt}",
                 numbers={"new": ",".join(new) or None, "new_items": sum(cand[k] for k in new)})


def _latency(base: list[float], cand: list[float], max_rise: float | None) -> Check:
    title = "p95 latency"
    pb, pc = spread(base), spread(cand)
    numbers: dict[str, float | int | str | None] = {"baseline_n": pb.n, "candidate_n": pc.n,
                                                    "baseline_p95_s": pb.p95, "candidate_p95_s": pc.p95,
                                                    "max_rise_pct": max_rise}
    if pb.n < MIN_LATENCY_N or pc.n < MIN_LATENCY_N:
        return Check(id="p95_latency", title=title, status="not measured",
                     detail=f"latency recorded for {pb.n} baseline and {pc.n} candidate "
                            f"paired item(s); both need at least {MIN_LATENCY_N} (offline-scored runs "
                            "record none)", numbers=numbers)
    b95, c95 = float(pb.p95 or 0.0), float(pc.p95 or 0.0)  # (observed: n is at least MIN_LATENCY_N)
    rise = (c95 - b95) / b95 * 100 if b95 > 0 else (0.0 if c95 <= 0 else math.inf)
    numbers["rise_pct"] = rise if math.isfinite(rise) else None
    shown = f"{rise:+.1f} %" if math.isfinite(rise) else "from 0 s"
    head = (f"baseline p95 {b95:.3f} s (n={pb.n}), candidate p95 {c95:.3f} s (n={pc.n}): "
            f"rise {shown}")
    if max_rise is None:
        return Check(id="p95_latency", title=title, status="not checked",
                     detail=f"{head}; not judged (no --max-p95-rise)", numbers=numbers)
    over = rise > max_rise if not math.isfinite(rise) else Fraction(rise) > _exact(max_rise)
    return Check(id="p95_latency", title=title, status="fail" if over else "pass",
                 detail=f"{head} {'>' if over else '≤'} max {max_rise:g} % (a rise equal to the bound passes)",
                 numbers=numbers)


def _identity(changed: list[str], n: int, required: bool) -> Check:
    same = n - len(changed)
    listed = _ids(changed)
    detail = f"{same}/{n} paired item(s) byte-identical (raw_text)" + (f"; changed: {listed}" if changed else "")
    if required:
        status: Status = "fail" if changed else "pass"
    else:
        status, detail = "not checked", detail + "; reported only (judged with --require-identical)"
    return Check(id="byte_identity", title="outputs byte-identical", status=status, detail=detail,
                 numbers={"identical": same, "changed": len(changed), "paired": n})


def _coverage(base_only: list[str], cand_only: list[str], paired: int) -> Check:
    status: Status = "fail" if base_only else "pass"
    detail = f"{paired} paired item(s)"
    if base_only:
        detail += f"; {len(base_only)} baseline item(s) missing from the candidate: {_ids(base_only)}"
    if cand_only:
        detail += f"; {len(cand_only)} candidate-only item(s), not compared: {_ids(cand_only)}"
    return Check(id="coverage", title="items covered", status=status, detail=detail,
                 numbers={"paired": paired, "baseline_only": len(base_only), "candidate_only": len(cand_only)})


def _ids(ids: list[str]) -> str:
    more = len(ids) - LIST_LIMIT
    return ", ".join(ids[:LIST_LIMIT]) + (f" … and {more} more" if more > 0 else "")


def _flip(b: bool, c: bool) -> Flip:
    if b and not c:
        return "right_to_wrong"
    if c and not b:
        return "wrong_to_right"
    return "both_right" if b else "both_wrong"


def run_gate(cfg: GateConfig) -> GateResult:
    """Compare ``cfg.candidate`` with ``cfg.baseline``; refusals raise :class:`InputError`."""
    bm, brecs = read_run(cfg.baseline)
    cm, crecs = read_run(cfg.candidate)
    check_same_inputs(cfg.baseline, bm, cfg.candidate, cm)
    paired_ids = sorted(brecs.keys() & crecs.keys())
    if not paired_ids:
        raise InputError(f"the runs share no item id (baseline {len(brecs)}, candidate {len(crecs)} "
                         "items): nothing to compare", field="--candidate")
    base_only = sorted(brecs.keys() - crecs.keys())
    cand_only = sorted(crecs.keys() - brecs.keys())

    items: list[ItemResult] = []
    base_err: dict[str, int] = {}
    cand_err: dict[str, int] = {}
    base_lat: list[float] = []
    cand_lat: list[float] = []
    base_valid = cand_valid = 0
    for item_id in paired_ids:
        b, c = brecs[item_id], crecs[item_id]
        bj, cj = b.judgement, c.judgement
        assert bj is not None and cj is not None  # (read_run: every record has its boolean correct_final)
        b_ok, c_ok = bool(bj.correct_final), bool(cj.correct_final)
        be, ce = bj.error_final, cj.error_final
        for counts, e in ((base_err, be), (cand_err, ce)):
            if e is not None:
                counts[str(e)] = counts.get(str(e), 0) + 1
        base_valid += b.answer.raw_intent is not None
        cand_valid += c.answer.raw_intent is not None
        for lat, rec in ((base_lat, b), (cand_lat, c)):
            v = rec.request.latency_s
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                lat.append(float(v))
        items.append(ItemResult(id=item_id, question=c.question, baseline_correct=b_ok, candidate_correct=c_ok,
                                flip=_flip(b_ok, c_ok), baseline_error=None if be is None else str(be),
                                candidate_error=None if ce is None else str(ce),
                                identical=b.answer.raw_text == c.answer.raw_text))
    n = len(items)
    rw = sum(i.flip == "right_to_wrong" for i in items)
    wr = sum(i.flip == "wrong_to_right" for i in items)
    base_k = sum(i.baseline_correct for i in items)
    cand_k = sum(i.candidate_correct for i in items)
    checks = [
        _coverage(base_only, cand_only, n),
        _mcnemar(rw, wr, cfg.alpha),
        _drop(base_k, cand_k, n, cfg.max_drop),
        _schema_valid(base_valid, cand_valid, n),
        _error_classes(base_err, cand_err),
        _latency(base_lat, cand_lat, cfg.max_p95_rise),
        _identity([i.id for i in items if not i.identical], n, cfg.require_identical),
    ]
    verdict: Literal["pass", "fail"] = "fail" if any(ch.status == "fail" for ch in checks) else "pass"
    return GateResult(verdict=verdict, config=cfg, baseline=_info(cfg.baseline, bm, len(brecs)),
                      candidate=_info(cfg.candidate, cm, len(crecs)), paired=n,
                      baseline_only=base_only, candidate_only=cand_only, checks=checks, items=items)
