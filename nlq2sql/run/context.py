"""The context a run needs: every prompt it will send, counted in the model's own tokens.

A local server gets ``--max-model-len`` = longest prompt + ``max_tokens``, rounded up to
:data:`ROUND_TO`, within ``max_position_embeddings`` (:data:`DEFAULT_CONTEXT`, said, if nothing can
count); an explicit value is honoured. An endpoint's ``max_model_len`` is read from ``/v1/models``.
A prompt that cannot fit is refused, naming item and sizes, before any server or request. Prompts
are counted as vLLM renders them (chat template over the prompt and each condition's ``before``,
generation prompt, no special tokens added) by the local model's tokenizer, else the endpoint's
``/tokenize``, else the run says it could not check."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nlq2sql.errors import InputError
from nlq2sql.records.manifest_parts import ContextPart
from nlq2sql.run.models import REGISTRY, is_complete, model_dir, resolve_model

if TYPE_CHECKING:
    from nlq2sql.conditions.registry import Condition, Messages, Settings
    from nlq2sql.stages.prompt import Prompt

__all__ = ["DEFAULT_CONTEXT", "ROUND_TO", "Counter", "PromptSizes", "check_against", "endpoint_counter",
           "item_messages", "local_counter", "model_folder", "model_limit", "prompt_sizes", "size_local"]

#: The sized context is a multiple of this many tokens (vLLM's block sizes divide it).
ROUND_TO = 256
#: A local server's context where the prompts could not be counted (a folder without a tokenizer).
DEFAULT_CONTEXT = 2048

#: Counts one item's messages in tokens, or None where it cannot.
Counter = Callable[["Messages"], int | None]


def item_messages(prompt: Prompt, conditions: Iterable[Condition[Settings]], question: str,
                  suffix: str = "") -> Messages:
    """The messages an item's request carries: the prompt, then each condition's additions
    (the same hooks, in the same order, as the item runner)."""
    messages = prompt.messages(question + suffix)
    for cond in conditions:
        messages, _ = cond.before(question, messages)
    return messages


def model_folder(model: str) -> Path | None:
    """The local Hugging Face folder of ``model`` (a pulled alias, or a folder path), else None.
    Nothing is downloaded here."""

    if model in REGISTRY:
        folder = model_dir(model)
        return folder if is_complete(folder) else None
    path = Path(model).expanduser()
    return path if (path / "config.json").is_file() and (path / "tokenizer_config.json").is_file() else None


def model_limit(folder: Path) -> int | None:
    """The model's own context limit: ``max_position_embeddings`` of its config.json."""
    try:
        value = json.loads((folder / "config.json").read_text()).get("max_position_embeddings")
    except (OSError, ValueError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def local_counter(folder: Path) -> Counter:
    """Count with the model's own tokenizer and chat template, as vLLM's chat endpoint does."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))

    def count(messages: Messages) -> int:
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return len(tok(text, add_special_tokens=False)["input_ids"])

    return count


def endpoint_counter(base_url: str, model: str, key: str, timeout_s: float = 15.0) -> Counter:
    """Count with the endpoint's ``/tokenize`` (vLLM's: chat messages in, ``count`` out); None
    for every item once the endpoint has none (a 404, a non-JSON answer)."""
    url = base_url.rstrip("/").removesuffix("/v1") + "/tokenize"
    state = {"works": True}

    def count(messages: Messages) -> int | None:
        if not state["works"]:
            return None
        body = json.dumps({"model": model, "messages": messages, "add_generation_prompt": True}).encode()
        req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json",
                                                              "Authorization": f"Bearer {key}"})
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 (the run's own endpoint)
                n = json.loads(resp.read()).get("count")
        except (urllib.error.URLError, OSError, ValueError, AttributeError):
            n = None
        if not isinstance(n, int):
            state["works"] = False
            return None
        return n

    return count


@dataclass(frozen=True)
class PromptSizes:
    """The run's prompts in tokens: the longest and its item (None where nothing was counted)."""

    longest: int | None
    item: str | None
    counted: int
    counted_by: str

    @classmethod
    def of(cls, items: Iterable[tuple[str, Messages]], count: Counter, counted_by: str) -> PromptSizes:
        longest: int | None = None
        item: str | None = None
        n = 0
        for case_id, messages in items:
            tokens = count(messages)
            if tokens is None:
                return cls(None, None, 0, f"not counted ({counted_by} could not count)")
            n += 1
            if longest is None or tokens > longest:
                longest, item = tokens, case_id
        return cls(longest, item, n, counted_by)


def _part(sizes: PromptSizes, max_tokens: int, max_model_len: int | None, source: str,
          **more: Any) -> ContextPart:
    """The manifest's ``context``: the sizes counted (where counted) and the context they met."""
    part = ContextPart(max_model_len=max_model_len, source=source, max_tokens=max_tokens, counted_by=sizes.counted_by,
                       **more)
    if sizes.longest is not None:  # assigned: written only where counted
        part.longest_prompt_tokens, part.longest_item, part.prompts_counted = sizes.longest, sizes.item, sizes.counted
    return part


def size_local(sizes: PromptSizes, max_tokens: int, given: int | None, limit: int | None) -> ContextPart:
    """The context of a server started for the run: ``given`` (checked), else the longest prompt
    plus ``max_tokens`` rounded up to :data:`ROUND_TO`, within the model's ``limit``.  Refused
    (exit 2, before anything starts) where a prompt cannot fit."""
    if sizes.longest is None:  # nothing to size from: the given context, else the default, said so
        if given is None:
            return _part(sizes, max_tokens, DEFAULT_CONTEXT, "default", model_limit=limit, checked=False,
                         note=f"not sized: prompts {sizes.counted_by}; --max-model-len {DEFAULT_CONTEXT} (the "
                              "default)")
        return _part(sizes, max_tokens, given, "given", model_limit=limit, checked=False,
                     note=f"not checked: prompts {sizes.counted_by}")
    need = sizes.longest + max_tokens
    if given is not None:
        if need > given:
            raise InputError(f"item {sizes.item}: prompt {sizes.longest} tokens + max_tokens {max_tokens} = {need} "
                             f"> --max-model-len {given}; raise it (at least {need}) or shorten the prompt",
                             field="--max-model-len")
        return _part(sizes, max_tokens, given, "given", model_limit=limit)
    if limit is not None and need > limit:
        raise InputError(f"longest prompt {sizes.longest} tokens (item {sizes.item}) + max_tokens {max_tokens} = "
                         f"{need} > model limit {limit} (max_position_embeddings): shorten the prompt (fewer "
                         "--examples, schema linking) or lower --max-tokens", field="--max-model-len")
    sized = math.ceil(need / ROUND_TO) * ROUND_TO
    return _part(sizes, max_tokens, min(sized, limit) if limit is not None else sized, "sized", model_limit=limit)


def check_against(sizes: PromptSizes, max_tokens: int, endpoint_len: int | None, endpoint: str) -> ContextPart:
    """An endpoint's prompts against its ``max_model_len``: refused before any request where one
    cannot fit; recorded as not checked where the endpoint states no length or nothing counted."""
    if endpoint_len is None or sizes.longest is None:
        why = "the endpoint states no max_model_len" if endpoint_len is None else f"prompts {sizes.counted_by}"
        return _part(sizes, max_tokens, endpoint_len, "endpoint", checked=False,
                     note=f"could not check the context: {why}")
    need = sizes.longest + max_tokens
    if need > endpoint_len:
        raise InputError(f"item {sizes.item}: prompt {sizes.longest} tokens + max_tokens {max_tokens} = {need} "
                         f"> the endpoint's max_model_len {endpoint_len} ({endpoint}): every such request would "
                         "overflow; shorten the prompt or lower --max-tokens", field="--endpoint")
    return _part(sizes, max_tokens, endpoint_len, "endpoint", checked=True)


def prompt_sizes(model: str, items: Iterable[tuple[str, Messages]], *, base_url: str | None = None,
                 key: str = "EMPTY") -> tuple[PromptSizes, int | None]:
    """The prompts counted with the model's tokenizer (a local folder), else the endpoint's
    ``/tokenize`` (``base_url``), and the model's own limit where its folder says it."""
    folder = model_folder(model)
    if folder is None and base_url is None:  # the server's own model: resolved as it would be (a bad path
        # refused, an alias fetched), then counted
        target = Path(resolve_model(model)[0])
        folder = target if target.is_dir() else None
    if folder is not None:
        try:
            counter = local_counter(folder)
        except (OSError, ValueError) as exc:  # a folder without a usable tokenizer
            return PromptSizes(None, None, 0, f"not counted (no tokenizer in {folder.name}: {exc})"), None
        return PromptSizes.of(items, counter, "tokenizer"), model_limit(folder)
    if base_url is not None:
        return PromptSizes.of(items, endpoint_counter(base_url, model, key), "endpoint /tokenize"), None
    return PromptSizes(None, None, 0, f"not counted (no local tokenizer for {model!r})"), None
