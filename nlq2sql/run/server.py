"""Start and stop a local vLLM (CPU) OpenAI-compatible server.

Its own process group lets :meth:`LocalServer.stop` end API server and engine together; any started
server is stopped at interpreter exit. Use :class:`LocalServer` as a context manager."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from nlq2sql.errors import InputError, ServerError
from nlq2sql.paths import cache_dir
from nlq2sql.records.manifest_parts import StructuredOutputs
from nlq2sql.run.models import DEFAULT_MODEL, resolve_model
from nlq2sql.run.serving import (
    COMPACT_BACKENDS,
    STRUCTURED_BACKENDS,
    batch_invariant_refusal,
    effective_structured_outputs,
    platform_device,
)

if TYPE_CHECKING:
    from nlq2sql.records.typed import JsonValue

__all__ = ["COMPACT_STRUCTURED_OUTPUTS", "STOP_GRACE_S", "LocalFleet", "LocalServer", "ServerConfig",
           "check_server_settings", "free_port", "is_port_in_use"]

COMPACT_STRUCTURED_OUTPUTS = json.dumps({"backend": "xgrammar", "disable_any_whitespace": True})
STOP_GRACE_S = 15.0


@dataclass(frozen=True)
class ServerConfig:
    model: str = DEFAULT_MODEL  # registered alias, local folder or hub id
    host: str = "127.0.0.1"
    port: int = 8000
    max_num_seqs: int | None = None
    max_model_len: int = 2048
    dtype: str = "bfloat16"
    # Server-wide whitespace-free structured outputs: per-request switches are ignored by vLLM,
    # and a weak model otherwise pads JSON with whitespace until max_tokens.
    compact: bool = True
    kv_cache_gib: int = 1
    extra_args: tuple[str, ...] = ()
    startup_timeout_s: float = 600.0
    # One replica per GPU group on a multi-GPU box (``serve --replicas N --gpus-per-replica G``):
    # the devices this server may see.  The CPU build ignores it.
    visible_devices: str | None = None
    # vLLM's structured-output backend (STRUCTURED_BACKENDS).  "auto" with ``compact`` is xgrammar:
    # vLLM takes the whitespace-free switch only with a named backend.
    structured_backend: str = "auto"
    # VLLM_BATCH_INVARIANT=1 (check ``batch_invariant_refusal`` first: the CPU build has no kernels).
    batch_invariant: bool = False

    def structured_outputs_config(self) -> str | None:
        """The ``--structured-outputs-config`` value, or None for vLLM's default (auto, whitespace allowed)."""
        if self.structured_backend not in STRUCTURED_BACKENDS:
            raise InputError(f"unknown structured-output backend {self.structured_backend!r} "
                             f"(known: {', '.join(STRUCTURED_BACKENDS)})", field="--structured-backend")
        if self.compact:
            backend = "xgrammar" if self.structured_backend == "auto" else self.structured_backend
            if backend not in COMPACT_BACKENDS:
                raise InputError(f"whitespace-free structured outputs (compact, on by default) need one of "
                                 f"{', '.join(COMPACT_BACKENDS)}; {backend} cannot drop whitespace: turn "
                                 "compact off (serve --no-compact, eval --no-compact-server)",
                                 field="--structured-backend")
            return json.dumps({"backend": backend, "disable_any_whitespace": True})
        if self.structured_backend == "auto":
            return None
        return json.dumps({"backend": self.structured_backend})


def is_port_in_use(host: str, port: int) -> bool:
    """True when something listens on (host, port) or the port cannot be bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        if probe.connect_ex((_client_host(host), port)) == 0:
            return True
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS considers free right now (racy by nature; fine for tests)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _client_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host


_FATAL = (b"EngineCore failed to start", b"Engine core initialization failed")


def _engine_failed(log: Path) -> bool:
    """vLLM logged that its engine died during start-up (checked on the log's last 64 KiB)."""
    try:
        with open(log, "rb") as fh:
            fh.seek(max(0, log.stat().st_size - 65536))
            text = fh.read()
    except OSError:
        return False
    return any(m in text for m in _FATAL)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def check_server_settings(config: ServerConfig) -> None:
    """Refuse, before anything starts or is written, a backend vLLM does not have, compact with
    a backend that cannot drop whitespace, and batch-invariant mode where vLLM has no kernels."""
    config.structured_outputs_config()
    if config.batch_invariant:
        why = batch_invariant_refusal(platform_device())
        if why is not None:
            raise InputError(f"refused: {why}", field="--batch-invariant")


class LocalServer:
    """A vLLM server child process. ``with LocalServer(ServerConfig(...)) as srv: srv.url``."""

    def __init__(self, config: ServerConfig | None = None) -> None:
        self.config = config or ServerConfig()
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None
        self.args: list[str] = []
        self.model_name: str = ""
        self.model_path: str = ""
        self.log_path: Path | None = None
        self.startup_s: float | None = None
        self.warmup_s: float | None = None
        #: What the engine reported at start-up (``effective_structured_outputs``), once started.
        self.structured: StructuredOutputs | None = None
        host = _client_host(self.config.host)
        self.base_url = f"http://{host}:{self.config.port}"
        self.url = f"{self.base_url}/v1"
        self._log: IO[bytes] | None = None
        self._rpc_dir = cache_dir() / "vllm-rpc"
        self._rpc_before: set[str] = set()

    # -- lifecycle -------------------------------------------------------------------
    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def build_args(self, python: str, model_path: str, served_name: str) -> list[str]:
        c = self.config
        args = [python, "-m", "vllm.entrypoints.openai.api_server",
                "--model", model_path, "--served-model-name", served_name,
                "--host", c.host, "--port", str(c.port),
                "--max-model-len", str(c.max_model_len), "--dtype", c.dtype]
        if c.max_num_seqs is not None:
            args += ["--max-num-seqs", str(c.max_num_seqs)]
        so = c.structured_outputs_config()
        if so is not None:
            args += ["--structured-outputs-config", so]
        return args + list(c.extra_args)

    def build_env(self) -> dict[str, str]:
        vllm_cache = cache_dir() / "vllm"
        vllm_cache.mkdir(parents=True, exist_ok=True)
        self._rpc_dir.mkdir(parents=True, exist_ok=True)
        return dict(os.environ, VLLM_CPU_KVCACHE_SPACE=str(self.config.kv_cache_gib),
                    VLLM_CACHE_ROOT=str(vllm_cache), VLLM_RPC_BASE_PATH=str(self._rpc_dir),
                    HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1",
                    # The CPU build never loads its own compile cache ("'function' object has no
                    # attribute 'finalize_loading'"), and a start killed mid-compile leaves a
                    # partial artifact that makes the *next* start fail with an ImportError.
                    VLLM_DISABLE_COMPILE_CACHE=os.environ.get("VLLM_DISABLE_COMPILE_CACHE", "1"),
                    VLLM_BATCH_INVARIANT="1" if self.config.batch_invariant else "0",
                    **({"CUDA_VISIBLE_DEVICES": self.config.visible_devices}
                       if self.config.visible_devices is not None else {}))

    def start(self) -> LocalServer:
        if self.running:
            return self
        c = self.config
        if is_port_in_use(c.host, c.port):
            raise ServerError(f"port {c.port} is already in use")
        self.model_path, self.model_name = resolve_model(c.model)
        python = os.environ.get("NLQ2SQL_VLLM_PYTHON") or sys.executable
        self.args = self.build_args(python, self.model_path, self.model_name)
        env = self.build_env()
        logs = cache_dir() / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        # One file per start: two starts on one port within a second (a backend whose engine died at
        # once, then the next) must not share a log, or the second reads the first's failure.
        stem = f"vllm-{c.port}-{time.strftime('%Y%m%d-%H%M%S')}"
        n = 0
        while (logs / f"{stem}{f'-{n}' if n else ''}.log").exists():
            n += 1
        self.log_path = logs / f"{stem}{f'-{n}' if n else ''}.log"
        self._rpc_before = set(os.listdir(self._rpc_dir))
        self._log = self.log_path.open("ab")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.pid = self.proc.pid
        atexit.register(self.stop)
        try:
            self._wait_healthy(t0 + c.startup_timeout_s)
            self.startup_s = time.monotonic() - t0
            self.structured = effective_structured_outputs(self.log_path)
            t1 = time.monotonic()
            self._warm_up()
            self.warmup_s = time.monotonic() - t1
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self, deadline: float) -> None:
        assert self.proc is not None and self.log_path is not None
        while True:
            if self.proc.poll() is not None:
                raise ServerError(f"vLLM server exited with code {self.proc.returncode} during "
                                  f"start-up; log {self.log_path}:\n{_tail(self.log_path)}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/health", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if _engine_failed(self.log_path):  # the API process may linger after its engine died
                raise ServerError(f"vLLM engine failed to start; log {self.log_path}:\n{_tail(self.log_path)}")
            if time.monotonic() > deadline:
                raise ServerError(f"vLLM server not healthy after {self.config.startup_timeout_s:.0f}"
                                  f" s; log {self.log_path}:\n{_tail(self.log_path)}")
            time.sleep(0.5)

    def _warm_up(self) -> None:
        body = {"model": self.model_name, "max_tokens": 8, "temperature": 0,
                "messages": [{"role": "user", "content": "Say hello."}]}
        try:
            self.post_json("/v1/chat/completions", body, timeout=300)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise ServerError(f"warm-up request failed: {exc}; log {self.log_path}:\n"
                              f"{_tail(self.log_path) if self.log_path else ''}") from exc

    def post_json(self, path: str, body: dict[str, Any], timeout: float = 60) -> JsonValue:
        req = urllib.request.Request(f"{self.base_url}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL after 15 s; idempotent."""
        proc, self.proc = self.proc, None
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        if proc is not None:
            pgid = proc.pid  # start_new_session: the leader's pid is the group id
            _signal_group(pgid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_GRACE_S
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                _signal_group(pgid, signal.SIGKILL)
                proc.wait(timeout=10)
            # The engine worker may outlive the API server for a moment.
            while _group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _group_alive(pgid):
                _signal_group(pgid, signal.SIGKILL)
        if self._log is not None:
            self._log.close()
            self._log = None
        self._remove_sockets()

    def _remove_sockets(self) -> None:
        if not self._rpc_dir.is_dir():
            return
        for name in set(os.listdir(self._rpc_dir)) - self._rpc_before:
            path = self._rpc_dir / name
            with contextlib.suppress(OSError):
                if stat.S_ISSOCK(path.lstat().st_mode):
                    path.unlink()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<LocalServer {self.model_name or self.config.model} {self.url} {state}>"


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


if __name__ == "__main__":  # manual testing only: start, print, wait for Ctrl-C
    import argparse

    parser = argparse.ArgumentParser(description="Start a local vLLM server (manual testing).")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--compact", action="store_true")
    ns = parser.parse_args()
    with LocalServer(ServerConfig(model=ns.model, port=ns.port, compact=ns.compact)) as srv:
        print(f"{srv.url} pid={srv.pid} startup={srv.startup_s:.1f}s warmup={srv.warmup_s:.1f}s "
              f"log={srv.log_path}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()


class LocalFleet:
    """N local vLLM replicas of one model (``serve --replicas N``): started together, each on
    its own port and log, and always all stopped.  ``urls`` go to ``--endpoint`` one by one."""

    def __init__(self, config: ServerConfig, replicas: int, gpus_per_replica: int | None = None) -> None:
        import dataclasses

        if replicas < 1:
            raise ServerError(f"--replicas must be at least 1, got {replicas}")
        ports: list[int] = []
        port = config.port
        while len(ports) < replicas:  # consecutive free ports from the one asked for
            if not is_port_in_use(config.host, port):
                ports.append(port)
            port += 1
        self.servers = [LocalServer(dataclasses.replace(
            config, port=p, visible_devices=(",".join(str(g) for g in range(i * gpus_per_replica,
                                                                            (i + 1) * gpus_per_replica))
                                             if gpus_per_replica else config.visible_devices)))
            for i, p in enumerate(ports)]

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def start(self) -> LocalFleet:
        """Start every replica at once (start-up dominates); if one fails, stop them all."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(len(self.servers)) as ex:
            futures = [ex.submit(s.start) for s in self.servers]
            errors = [f.exception() for f in futures]
        failed = next((e for e in errors if e is not None), None)
        if failed is not None:
            self.stop()
            raise failed
        return self

    def stop(self) -> None:
        for s in self.servers:
            s.stop()

    def __enter__(self) -> LocalFleet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
