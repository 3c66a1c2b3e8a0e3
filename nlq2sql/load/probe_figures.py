"""One streamed request as a probe saw it: typed while probing, never written (the probes'
results, built from these, are declared in :mod:`.probe_results`)."""

from __future__ import annotations

from typing import Any

from nlq2sql.records.typed import Num, Typed

__all__ = ["Stream"]


class Stream(Typed):
    """One streamed chat request as the client saw it (not written: the probes' rows are)."""

    status: int | None
    error: str | None
    ttft_s: Num | None
    latency_s: Num | None
    chunks: int  # content chunks received (≈ tokens)
    finish_reason: str | None
    usage: dict[str, Any] | None  # the server's usage object, as sent
    disconnected: bool
    t_start: float
    t_disconnect: float | None = None  # when the client disconnected (a disconnecting probe)
