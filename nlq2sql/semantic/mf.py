"""Living with MetricFlow as a library: its loggers kept quiet, its error reports made one line."""

from __future__ import annotations

import logging

__all__ = ["mf_reason", "quiet"]


def quiet() -> None:
    """MetricFlow logs warnings to the root logger as it works; the harness reports problems itself."""
    for name in ("metricflow", "metricflow_semantics", "metricflow_semantic_interfaces"):
        logging.getLogger(name).setLevel(logging.ERROR)


def mf_reason(exc: BaseException) -> str:
    """MetricFlow's message, made one paragraph (its errors are multi-line reports, some with tracebacks)."""
    text = str(exc).split("Traceback", 1)[0]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    keep = [ln for ln in lines if not ln.startswith(("Error #", "Query(", "Suggestions:", "Issue Location:"))]
    out = " ".join(keep[:6]) or type(exc).__name__
    return out[:600]
