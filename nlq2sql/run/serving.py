"""What the local vLLM is asked to be beyond its model (structured-output backend, batch-invariant
mode) and what it says it became: the run records the backend the engine *logged* at start-up,
and batch invariance on a CPU (kernels exist only for GPUs and XPU) is refused with the reason."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from nlq2sql.errors import ServerError
from nlq2sql.records.manifest_parts import StructuredOutputs

__all__ = ["BATCH_INVARIANT_DEVICES", "COMPACT_BACKENDS", "STRUCTURED_BACKENDS", "UNKNOWN_BACKEND",
           "batch_invariant_refusal", "effective_structured_outputs", "endpoint_structured_outputs", "platform_device"]

#: vLLM's structured-output backends (``StructuredOutputsConfig.backend`` in 0.32).
STRUCTURED_BACKENDS = ("auto", "xgrammar", "guidance", "outlines", "lm-format-enforcer")
#: The backends that can drop whitespace between JSON tokens (vLLM refuses
#: ``disable_any_whitespace`` with the others, and with ``auto``).
COMPACT_BACKENDS = ("xgrammar", "guidance")
#: The engine's configuration as vLLM logs it at start-up (``core.py``: "Initializing a V1 LLM
#: engine ... structured_outputs_config=StructuredOutputsConfig(backend='xgrammar', ...)").
_SO_LINE = re.compile(r"structured_outputs_config=StructuredOutputsConfig\(backend='([^']*)', "
                      r"disable_any_whitespace=(True|False)")
#: Devices on which the installed vLLM implements batch-invariant kernels
#: (``model_executor/determinism/batch_invariant.py``: CUDA/ROCm Triton or cuBLAS settings, XPU Triton).
BATCH_INVARIANT_DEVICES = ("cuda", "rocm", "xpu")
#: The backend of an endpoint the run did not start, when it does not say.
UNKNOWN_BACKEND = "unknown (external endpoint)"


def effective_structured_outputs(log: Path | None) -> StructuredOutputs | None:
    """The structured-output configuration the engine *reports* at start-up (its log), not the one
    asked for: {"backend", "disable_any_whitespace"}; None when the log does not say."""
    if log is None:
        return None
    try:
        with open(log, "rb") as fh:
            text = fh.read(4 << 20).decode("utf-8", errors="replace")
    except OSError:
        return None
    found = _SO_LINE.findall(text)
    if not found:
        return None
    backend, compact = found[-1]  # the engine core's line comes after the API server's
    return StructuredOutputs(backend=backend, disable_any_whitespace=compact == "True", source="server log")

def endpoint_structured_outputs(base_url: str, key: str, timeout_s: float = 10.0) -> StructuredOutputs:
    """The structured-output backend an endpoint this run did not start reports, if it does.
    vLLM's ``/server_info`` (served with ``VLLM_SERVER_DEV_MODE=1``) holds the engine config, with
    the same ``structured_outputs_config=…`` text as the start-up log; ``/version`` and ``/metrics``
    do not name the backend.  Otherwise the backend is :data:`UNKNOWN_BACKEND` (the canary still
    runs: it is what shows whether the constraints hold)."""
    root = base_url.rstrip("/").removesuffix("/v1")
    req = urllib.request.Request(root + "/server_info?config_format=text",
                                 headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 — the run's own endpoint
            text = resp.read(4 << 20).decode("utf-8", errors="replace")
    except (urllib.error.URLError, OSError, ValueError):
        text = ""
    found = _SO_LINE.findall(text)
    if not found:
        return StructuredOutputs(backend=UNKNOWN_BACKEND, disable_any_whitespace=None, source=None)
    backend, compact = found[-1]
    return StructuredOutputs(backend=backend, disable_any_whitespace=compact == "True", source="endpoint /server_info")


def platform_device(python: str | None = None) -> str:
    """The device type the installed vLLM runs on (``current_platform.device_type``), asked of
    the interpreter that will run the server (importing vLLM takes seconds: asked once)."""
    return _device_of(python or os.environ.get("NLQ2SQL_VLLM_PYTHON") or sys.executable)


@functools.lru_cache(maxsize=4)
def _device_of(python: str) -> str:
    try:
        done = subprocess.run([python, "-c", "from vllm.platforms import current_platform as p;"
                               "print('rocm' if p.is_rocm() else p.device_type)"],
                              capture_output=True, text=True, timeout=300,
                              env=dict(os.environ, VLLM_NO_USAGE_STATS="1"))
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ServerError(f"cannot ask vLLM for its platform: {exc}") from exc
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise ServerError(f"cannot ask vLLM for its platform: {done.stderr.strip()[-300:]}")
    return lines[-1].strip()


def batch_invariant_refusal(device: str) -> str | None:
    """Why batch-invariant mode cannot be turned on for ``device`` (None: it can)."""
    if device in BATCH_INVARIANT_DEVICES:
        return None
    return (f"the installed vLLM implements batch-invariant mode (VLLM_BATCH_INVARIANT) only on "
            f"{', '.join(BATCH_INVARIANT_DEVICES)} (Triton / cuBLAS kernels); this platform is {device!r}, "
            "where the flag would install GPU kernels over CPU operators or do nothing")
