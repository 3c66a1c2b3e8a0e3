"""Living with MetricFlow as a library: its loggers kept quiet, its error reports made one line.

``mf_reason`` puts the reason of an error that begins with an object's whole repr first, naming the
object by kind, name and file:line; ``mf_problem`` makes it a :class:`Problem` at that file, line and key."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from nlq2sql.semantic.project import Problem

__all__ = ["mf_problem", "mf_reason", "quiet"]


def quiet() -> None:
    """MetricFlow logs warnings to the root logger as it works; the harness reports problems itself."""
    for name in ("metricflow", "metricflow_semantics", "metricflow_semantic_interfaces"):
        logging.getLogger(name).setLevel(logging.ERROR)


@dataclass(frozen=True)
class _Culprit:
    """The project object a MetricFlow error is about, and where the YAML defines it."""

    kind: str  # the project's key: metrics, semantic_models, saved_queries
    name: str
    path: str | None
    line: int | None
    reason: str  # the error's text with the object's repr taken out
    obj: Any  # MetricFlow's object


#: MetricFlow's object classes → the key of the project that holds them.
_KINDS = {"PydanticMetric": "metrics", "PydanticSemanticModel": "semantic_models",
          "PydanticSavedQuery": "saved_queries"}


def _culprit(exc: BaseException) -> _Culprit | None:
    """The object whose repr the message embeds, found among the failing frames' locals."""
    text = str(exc)
    tb = exc.__traceback__
    found: _Culprit | None = None
    while tb is not None:
        for value in list(tb.tb_frame.f_locals.values()):
            kind = _KINDS.get(type(value).__name__)
            if kind is None or found is not None:
                continue
            shown = str(value)
            if len(shown) > 40 and shown in text:
                meta = getattr(value, "metadata", None)
                file_slice = getattr(meta, "file_slice", None)
                found = _Culprit(kind, str(getattr(value, "name", "?")), getattr(meta, "repo_file_path", None),
                                 getattr(file_slice, "start_line_number", None),
                                 " ".join(text.replace(shown, "", 1).split()), value)
        tb = tb.tb_next
    return found


def _reworded(c: _Culprit) -> tuple[str, str]:
    """(key, reason) for a culprit; MetricFlow's wording of a ratio without both inputs made plain."""
    key = f"{c.kind}.{c.name}"
    if c.kind == "metrics" and "numerator and denominator should not be None" in c.reason:
        params = getattr(c.obj, "type_params", None)
        missing = [k for k in ("numerator", "denominator") if getattr(params, k, None) is None]
        return (key + ".type_params",
                f"ratio metric {c.name!r} has no {' and no '.join(missing) or 'numerator or denominator'}: a "
                "ratio divides its numerator metric by its denominator metric (type_params.numerator, "
                "type_params.denominator)")
    label = {"metrics": "metric", "semantic_models": "semantic model", "saved_queries": "saved query"}[c.kind]
    reason = c.reason[3:] if c.reason.startswith("is ") else c.reason
    return key, f"{label} {c.name!r}: {reason}"


def mf_reason(exc: BaseException) -> str:
    """MetricFlow's message, made one paragraph (its errors are multi-line reports, some with
    tracebacks); an object's repr in it is replaced by its kind, name and file:line, reason first."""
    culprit = _culprit(exc)
    if culprit is not None:
        _, reason = _reworded(culprit)
        where = f"{culprit.path}:{culprit.line}" if culprit.path and culprit.line else culprit.path
        return reason + (f" ({where})" if where else "")
    text = str(exc).split("Traceback", 1)[0]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    keep = [ln for ln in lines if not ln.startswith(("Error #", "Query(", "Suggestions:", "Issue Location:"))]
    out = " ".join(keep[:6]) or type(exc).__name__
    return out[:600]


def mf_problem(exc: BaseException, path: str, prefix: str = "MetricFlow: ") -> Problem:
    """A MetricFlow failure as a project problem: at the file, line and key of the object it is
    about where the error names one (reason first), else at ``path`` with ``prefix``."""
    culprit = _culprit(exc)
    if culprit is None:
        return Problem(path, None, None, prefix + mf_reason(exc))
    key, reason = _reworded(culprit)
    return Problem(culprit.path or path, culprit.line, key, reason)
