"""The structured-output canary: one short request whose constraint the server must enforce.

A server that silently ignores the constraint would make every later number measure free text as if
constrained. So before a run writes anything the model is asked to echo JSON that breaks the canary
three ways (an enum value outside the vocabulary, an extra property, whitespace under the compact
grammar); any of them stops the run with one line (exit 2). Each constraint kind sent (JSON Schema,
regex, choice, grammar) is canaried over the same two answers (``{"color":"red"}`` / ``"green"``);
a reply cut off by ``max_tokens`` passes only while it is a prefix of an allowed answer."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable
from typing import Any

from nlq2sql.answers.kinds import KINDS
from nlq2sql.errors import InputError
from nlq2sql.inputs import strip_whitespace_outside_strings
from nlq2sql.records.manifest_parts import CanaryPart
from nlq2sql.transport.client import EndpointConfig, RetryBudget, Sampling, complete, make_client

__all__ = ["ALLOWED", "CANARY_GRAMMAR", "CANARY_QUESTION", "CANARY_REGEX", "CANARY_SCHEMA", "ConstraintsNotEnforced",
           "canary_modes", "canary_verdict", "check_constraints", "choice_verdict", "require_constraints", "run_modes"]

#: The last user message of the canary request (the fake test server recognises it).
CANARY_QUESTION = ('nlq2sql structured-output canary. Reply with exactly this JSON and nothing else: '
                   '{ "color" : "purple" , "size" : 7 }')
ALLOWED = ("red", "green")
CANARY_SCHEMA: dict[str, Any] = {
    "type": "object", "properties": {"color": {"type": "string", "enum": list(ALLOWED)}},
    "required": ["color"], "additionalProperties": False}
#: Allowed answers, compact: a reply cut by max_tokens must still be a prefix of one of these.
_ALLOWED_TEXTS = tuple(json.dumps({"color": c}, separators=(",", ":")) for c in ALLOWED)
MAX_TOKENS = 32
#: The same language as a regex and as an xgrammar EBNF grammar (the dialect of the SQL grammar).
CANARY_REGEX = r'\{"color":"(red|green)"\}'
CANARY_GRAMMAR = 'root ::= "{\\"color\\":\\"" ("red" | "green") "\\"}"'
#: Structured modes a canary checks: every constraint kind the harness sends ("none" carries none).
_MODES = ("json", "response_format", "regex", "choice", "grammar")


class ConstraintsNotEnforced(InputError):
    """The server answered the canary outside its schema: the run must not start."""


def canary_modes() -> tuple[str, ...]:
    """The structured modes a run is canaried in."""
    return _MODES


def run_modes(structured: str, answer: str, condition_modes: Iterable[str] = ()) -> tuple[str, ...]:
    """The constraint modes a run's requests carry, first its own: the sampling's (the
    ``sql-grammar`` answer: a grammar; free ``sql``: none), then its conditions' (the planner's
    choice); only those a canary checks, each once."""
    own = KINDS[answer].constraint_mode(structured)
    return tuple(dict.fromkeys(m for m in (own, *condition_modes) if m in _MODES))


def choice_verdict(text: str | None, finish_reason: str | None) -> str | None:
    """Why ``text`` is not one of the canary's choices (None: it is)."""
    text = text or ""
    if text in ALLOWED or (finish_reason == "length" and any(a.startswith(text) for a in ALLOWED)):
        return None
    return f"a reply outside the choices {'/'.join(ALLOWED)}: {text[:80]!r}"


def canary_verdict(text: str | None, finish_reason: str | None, compact: bool) -> str | None:
    """Why ``text`` violates the canary schema (None: it does not).  ``compact``: the server is
    known to run the whitespace-free grammar, so whitespace between tokens is a violation too."""
    text = text or ""
    bare = strip_whitespace_outside_strings(text)
    if compact and len(bare) != len(text):
        return f"whitespace between JSON tokens under the compact grammar: {text[:80]!r}"
    if finish_reason == "length":  # cut short: what it wrote must still lead to an allowed answer
        if any(a.startswith(bare) for a in _ALLOWED_TEXTS):
            return None
        return f"the reply left the schema before max_tokens: {text[:80]!r}"
    try:
        value = json.loads(bare)
    except json.JSONDecodeError:
        return f"the reply is not JSON: {text[:80]!r}"
    if not isinstance(value, dict):
        return f"the reply is not a JSON object: {text[:80]!r}"
    extra = sorted(set(value) - {"color"})
    if extra:
        return f"a property the schema forbids ({', '.join(extra)}): {text[:80]!r}"
    if value.get("color") not in ALLOWED:
        return f"an enum value outside the schema ({value.get('color')!r}): {text[:80]!r}"
    return None


async def check_constraints(base_url: str, model: str, key: str, structured: str, *, compact: bool,
                            client: str = "aiohttp", timeout_s: float = 60.0) -> CanaryPart:
    """Send the canary in the run's structured mode and judge the reply, as the manifest records it
    (``structured_canary``: the reply cut to 200 characters, the latency to ms).  An HTTP failure is
    raised (the server cannot serve even a two-value enum), never taken for a pass."""
    sampling = Sampling(max_tokens=MAX_TOKENS, temperature=0.0, structured=structured,
                        schema_json=json.dumps(CANARY_SCHEMA, separators=(",", ":")),
                        regex=CANARY_REGEX if structured == "regex" else None,
                        choices=ALLOWED if structured == "choice" else None,
                        grammar=CANARY_GRAMMAR if structured == "grammar" else None)
    cfg = EndpointConfig(base_url=base_url, model=model, api_key=key, timeout_s=timeout_s, concurrency=1,
                         client=client)
    http = make_client(cfg)
    try:
        out = await complete(http, cfg, [{"role": "user", "content": CANARY_QUESTION}], sampling,
                             RetryBudget(1, 2.0))
    finally:
        await http.close()
    if out.outcome != "ok":
        raise ConstraintsNotEnforced(f"the structured-output canary request to {base_url} failed "
                                     f"({out.outcome}: {out.error})", field="--endpoint")
    exact = structured in ("regex", "grammar")  # their language has no whitespace at all
    reason = (choice_verdict(out.text, out.finish_reason) if structured == "choice"
              else canary_verdict(out.text, out.finish_reason, compact or exact))
    return CanaryPart(passed=reason is None, reason=reason, text=(out.text or "")[:200],
                      finish_reason=out.finish_reason, structured=structured, compact_checked=compact,
                      latency_s=round(out.latency_s, 3) if out.latency_s is not None else None)


def require_constraints(base_url: str, model: str, key: str, structured: str | tuple[str, ...], *,
                        compact: bool, client: str = "aiohttp") -> CanaryPart | None:
    """Run the canary in each of the run's constraint modes (``run_modes``; one mode may be given
    as a string) and refuse a server that ignores any; the first mode's result carries the others."""
    modes = [m for m in ((structured,) if isinstance(structured, str) else structured) if m in _MODES]
    results: list[CanaryPart] = []
    for mode in dict.fromkeys(modes):
        t0 = time.monotonic()
        result = asyncio.run(check_constraints(base_url, model, key, mode, compact=compact, client=client))
        if not result.passed:
            raise ConstraintsNotEnforced(
                f"constraints are not enforced by this server ({base_url}, structured mode {mode}): the "
                f"canary's reply broke its {'schema' if mode in ('json', 'response_format') else mode} -- "
                f"{result.reason}; nothing was written (checked in {time.monotonic() - t0:.1f} s)",
                field="--endpoint")
        results.append(result)
    if not results:
        return None
    first = results[0]
    if results[1:]:  # (written only when any)
        first.also = results[1:]
    return first
