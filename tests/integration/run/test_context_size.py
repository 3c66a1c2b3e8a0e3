"""The context sized to the work (``nlq2sql.run.context``): a local server's ``--max-model-len``
from the longest prompt in the model's own tokens, a given one checked, an endpoint's
``max_model_len`` checked; a prompt that cannot fit is refused with the sizes (exit 2, nothing
started, sent or written)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from fakeserver import FakeServer, script
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.errors import InputError
from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.run.context import ROUND_TO, PromptSizes, size_local

# SmolLM2's converted folder, in the project's cache after setup (tests run with a private cache,
# so the run is given the folder itself: nothing is fetched).
FOLDER = PROJECT_ROOT / ".cache" / "models" / "smollm2-135m"
MODEL = str(FOLDER)


def _folder() -> Path:
    assert (FOLDER / "tokenizer_config.json").is_file(), "not pulled: python -m nlq2sql.run.models pull smollm2-135m"
    return FOLDER


def _longest(evalset: str, limit: int | None = None) -> tuple[str, int]:
    """The dev set's longest prompt counted independently: the tokenizer's own tokenising chat template."""
    from transformers import AutoTokenizer

    from nlq2sql.semantic import open_warehouse
    from nlq2sql.stages.evalset import load_evalset
    from nlq2sql.stages.prompt import load_prompt

    wh = open_warehouse("retail")
    prompt = load_prompt("baseline", "default", wh)
    tok = AutoTokenizer.from_pretrained(str(_folder()))
    cases = load_evalset(evalset, wh).cases[:limit]
    sizes = {c.id: len(tok.apply_chat_template(prompt.messages(c.question), tokenize=True,
                                               add_generation_prompt=True)["input_ids"]) for c in cases}
    item = max(sizes, key=lambda k: sizes[k])
    return item, sizes[item]


@given(longest=st.integers(1, 50_000), max_tokens=st.integers(1, 4096),
       limit=st.one_of(st.none(), st.integers(128, 65_536)))
def test_sized_context_fits_the_prompt_within_the_limit(longest: int, max_tokens: int, limit: int | None) -> None:
    sizes = PromptSizes(longest, "q1", 3, "tokenizer")
    need = longest + max_tokens
    if limit is not None and need > limit:
        with pytest.raises(InputError) as exc:
            size_local(sizes, max_tokens, None, limit)
        assert f"{longest} tokens" in str(exc.value) and f"model limit {limit}" in str(exc.value)
        return
    part = size_local(sizes, max_tokens, None, limit)
    assert part.max_model_len is not None and part.max_model_len >= need and part.source == "sized"
    assert part.max_model_len == limit or part.max_model_len % ROUND_TO == 0
    assert part.max_model_len - need < ROUND_TO


def test_given_context_is_honoured_or_refused_with_the_figures() -> None:
    sizes = PromptSizes(900, "d7", 5, "tokenizer")
    assert size_local(sizes, 100, 1000, 8192).max_model_len == 1000
    with pytest.raises(InputError) as exc:
        size_local(sizes, 101, 1000, 8192)
    assert "item d7: prompt 900 tokens + max_tokens 101 = 1001 > --max-model-len 1000" in str(exc.value)


def test_evals_own_server_is_sized_from_its_longest_prompt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from nlq2sql.run import server

    seen: list[int] = []

    class Stop(Exception):
        pass

    def start(self: server.LocalServer) -> None:
        seen.append(self.config.max_model_len)
        raise Stop

    monkeypatch.setattr(server.LocalServer, "start", start)
    CliRunner().invoke(app, ["eval", "--evalset", "dev", "--limit", "5", "--max-tokens", "100",
                             "--model", MODEL, "--out", str(tmp_path / "r")])
    _, longest = _longest("dev", 5)
    assert seen == [math.ceil((longest + 100) / ROUND_TO) * ROUND_TO]


def test_a_prompt_over_the_given_context_is_refused_before_the_server_starts(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from nlq2sql.run import server

    started: list[bool] = []
    monkeypatch.setattr(server.LocalServer, "start", lambda self: started.append(True))
    out = tmp_path / "r"
    res = CliRunner().invoke(app, ["eval", "--evalset", "dev", "--limit", "5", "--max-model-len", "256",
                                   "--max-tokens", "128", "--model", MODEL, "--out", str(out)])
    item, longest = _longest("dev", 5)
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert f"item {item}: prompt {longest} tokens + max_tokens 128 = {longest + 128} > --max-model-len 256" in text
    assert not started and not out.exists()


def test_an_endpoint_too_short_for_a_prompt_is_refused_before_any_request(tmp_path: Path) -> None:
    out = tmp_path / "r"
    with FakeServer(tmp_path, script(), model=MODEL, max_model_len=300) as fake:
        res = CliRunner().invoke(app, ["eval", "--evalset", "dev", "--limit", "5", "--endpoint", fake.url,
                                       "--model", MODEL, "--out", str(out)])
        paths = [json.loads(line).get("path") for line in fake.log.read_text().splitlines()]
    item, longest = _longest("dev", 5)
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert f"item {item}: prompt {longest} tokens + max_tokens 128 = {longest + 128} > the endpoint's " \
           "max_model_len 300" in text
    assert "/v1/chat/completions" not in paths and not out.exists()


def test_an_endpoint_counts_with_its_tokenize_and_the_manifest_records_the_context(tmp_path: Path) -> None:
    """A served name no local folder has: vLLM's /tokenize counts (the fake's: characters / 4)."""
    with FakeServer(tmp_path, script(), tokenize=True, max_model_len=200) as fake:
        res = CliRunner().invoke(app, ["eval", "--evalset", "dev", "--limit", "3", "--endpoint", fake.url,
                                       "--model", "fake-model", "--out", str(tmp_path / "short")])
        assert res.exit_code == 2 and "> the endpoint's max_model_len 200" in " ".join(res.output.split())
    with FakeServer(tmp_path, script(), tokenize=True, max_model_len=4096) as fake:
        res = CliRunner().invoke(app, ["eval", "--evalset", "dev", "--limit", "3", "--endpoint", fake.url,
                                       "--model", "fake-model", "--out", str(tmp_path / "ok")])
    assert res.exit_code == 0, res.output
    context = json.loads((tmp_path / "ok" / "manifest.json").read_text())["context"]
    assert context["source"] == "endpoint" and context["max_model_len"] == 4096 and context["checked"] is True
    assert context["counted_by"] == "endpoint /tokenize" and context["prompts_counted"] == 3
    assert 0 < context["longest_prompt_tokens"] < 4096 - 128


def test_an_endpoint_that_cannot_count_is_said_and_recorded_unchecked(tmp_path: Path) -> None:
    with FakeServer(tmp_path, script()) as fake:
        res = CliRunner().invoke(app, ["eval", "--evalset", "dev", "--limit", "2", "--endpoint", fake.url,
                                       "--model", "fake-model", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    context = json.loads((tmp_path / "r" / "manifest.json").read_text())["context"]
    assert context["checked"] is False and "could not check" in context["note"]
    assert "longest_prompt_tokens" not in context  # nothing counted


def test_a_model_without_a_tokenizer_keeps_the_default_context_and_says_so(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from nlq2sql.run import server

    model = tmp_path / "bare"
    model.mkdir()
    (model / "config.json").write_text("{}")
    seen: list[int] = []

    class Stop(Exception):
        pass

    def start(self: server.LocalServer) -> None:
        seen.append(self.config.max_model_len)
        raise Stop

    monkeypatch.setattr(server.LocalServer, "start", start)
    res = CliRunner().invoke(app, ["eval", "--evalset", "dev", "--limit", "2", "--model", str(model),
                                   "--out", str(tmp_path / "r")])
    assert seen == [2048] and "not sized" in res.output
