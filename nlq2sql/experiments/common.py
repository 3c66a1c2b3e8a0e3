"""Shared by the experiments: one endpoint for all their runs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from ..live import EvalConfig


@contextmanager
def shared_endpoint(cfg: EvalConfig) -> Iterator[EvalConfig]:
    """Yield ``cfg`` bound to an endpoint: the given one, or one local vLLM for all runs.

    Starting a CPU server costs a minute or more, so an experiment with several runs
    starts one and stops it at the end, whatever happens.
    """
    if cfg.endpoint is not None:
        yield cfg
        return
    from ..server import LocalServer, ServerConfig, free_port

    server = LocalServer(ServerConfig(model=cfg.model, port=cfg.port or free_port(),
                                      compact=cfg.compact_server, max_num_seqs=cfg.max_num_seqs))
    server.start()
    try:
        yield replace(cfg, endpoint=server.url, model=server.model_name)
    finally:
        server.stop()
