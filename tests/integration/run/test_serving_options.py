"""serve / eval local-server options: the structured-output backend and batch-invariant mode are
refused with the reason (exit 2, nothing started or written) where vLLM cannot honour them."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.run.serving import batch_invariant_refusal, platform_device


def test_batch_invariant_is_refused_on_this_platform_with_the_reason(tmp_path: Path) -> None:
    device = platform_device()  # asked of the installed vLLM, not assumed
    why = batch_invariant_refusal(device)
    if why is None:  # a GPU box: the flag is taken, nothing to refuse
        return
    res = CliRunner().invoke(app, ["serve", "--batch-invariant", "--port", "8199"])
    assert res.exit_code == 2 and "--batch-invariant" in res.output and device in res.output
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["eval", "--batch-invariant", "--limit", "1", "--out", str(out)])
    assert res.exit_code == 2 and "only on" in res.output and not out.exists()


def test_backend_options_are_checked_before_anything_starts(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["serve", "--structured-backend", "outlines", "--port", "8199"])
    assert res.exit_code == 2 and "cannot drop whitespace" in res.output
    res = CliRunner().invoke(app, ["serve", "--structured-backend", "llguidance", "--port", "8199"])
    assert res.exit_code == 2 and "unknown structured-output backend" in res.output
    res = CliRunner().invoke(app, ["eval", "--endpoint", "http://127.0.0.1:9/v1", "--structured-backend",
                                   "guidance", "--out", str(tmp_path / "r")])
    assert res.exit_code == 2 and "only for a local server" in res.output
    res = CliRunner().invoke(app, ["backends", "--backend", "xgrammar", "--backend", "xgrammar",
                                   "--out", str(tmp_path / "b")])
    assert res.exit_code == 2 and "named twice" in res.output and not (tmp_path / "b").exists()


def test_serve_startup_timeout_is_checked_and_reaches_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25: a loaded machine can need more than 600 s to start vLLM: ``--startup-timeout``."""
    from nlq2sql.run import server

    for bad in ("0", "-5", "nan", "100000"):
        res = CliRunner().invoke(app, ["serve", "--startup-timeout", bad, "--port", "8199"])
        assert res.exit_code == 2 and "--startup-timeout" in res.output, (bad, res.output)
    seen: list[float] = []

    class Fleet:
        def __init__(self, config: server.ServerConfig, *_: object) -> None:
            seen.append(config.startup_timeout_s)

        def start(self) -> None:
            raise KeyboardInterrupt  # stop at once: what matters is the configuration it got

        def stop(self) -> None:
            pass

    monkeypatch.setattr(server, "LocalFleet", Fleet)
    CliRunner().invoke(app, ["serve", "--startup-timeout", "1800", "--port", "8199"])
    CliRunner().invoke(app, ["serve", "--port", "8199"])
    assert seen == [1800.0, 600.0]


def test_evals_own_server_takes_startup_timeout_and_context(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The server ``eval`` starts (no --endpoint) gets ``--startup-timeout`` and ``--max-model-len``
    as ``serve``'s does; bad values are refused before anything is written."""
    from nlq2sql.run import server

    for opt, bad in (("--startup-timeout", "0"), ("--startup-timeout", "1e9"), ("--max-model-len", "16")):
        res = CliRunner().invoke(app, ["eval", "--evalset", "dev", opt, bad, "--out", str(tmp_path / "x")])
        assert res.exit_code == 2 and opt in res.output, (opt, bad, res.output)
        assert not (tmp_path / "x").exists()
    seen: list[tuple[float, int]] = []

    class Stop(Exception):
        pass

    def start(self: server.LocalServer) -> None:
        seen.append((self.config.startup_timeout_s, self.config.max_model_len))
        raise Stop  # what matters is the configuration it got

    monkeypatch.setattr(server.LocalServer, "start", start)
    model = str(PROJECT_ROOT / ".cache" / "models" / "smollm2-135m")  # counted with its tokenizer, nothing fetched
    for args in (["--startup-timeout", "1800", "--max-model-len", "4096"], []):
        CliRunner().invoke(app, ["eval", "--evalset", "dev", "--limit", "1", *args, "--model", model,
                                 "--out", str(tmp_path / "r"), "--force"])
    assert seen[0] == (1800.0, 4096)
    assert seen[1][0] == 600.0 and seen[1][1] % 256 == 0  # sized from the prompts (test_context_size)
