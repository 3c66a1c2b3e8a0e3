"""One real local vLLM (CPU build, default model) shared by every live test in a session.

Starting a CPU server takes 70–100 s, so tests share it; a test that needs different
server settings starts its own.  Live tests are marked ``live`` (CI runs them).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nlq2sql.run.server import LocalServer, ServerConfig, free_port


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/live/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.live)


@pytest.fixture(scope="session")
def vllm_server() -> Iterator[LocalServer]:
    server = LocalServer(ServerConfig(model="smollm2-135m", port=free_port(), startup_timeout_s=900))
    server.start()
    try:
        yield server
    finally:
        server.stop()
