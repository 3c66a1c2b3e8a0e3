"""The ``sql-grammar`` answer in a run: bind the warehouse's grammar, probe the server with it first.

A grammar the server cannot compile fails every request (HTTP 400), so a refusal of the probe is one
error with the server's reason before any item or output. The grammar and its sha256 go in ``sampling``."""

from __future__ import annotations

import dataclasses
import json
import urllib.error
import urllib.request
from typing import TYPE_CHECKING

from nlq2sql.answers.kinds import KINDS
from nlq2sql.errors import InputError

if TYPE_CHECKING:
    from nlq2sql.answers.sql.grammar import SqlGrammar
    from nlq2sql.semantic.binding import Warehouse
    from nlq2sql.transport.client import Sampling

__all__ = ["grammar_for", "probe_grammar", "with_grammar"]

PROBE_TOKENS = 8


def grammar_for(answer: str, wh: Warehouse) -> SqlGrammar | None:
    """The grammar the answer kind's requests are constrained by (the ``sql-grammar`` answer's: the
    warehouse's SQL grammar; None for the others)."""
    grammar: SqlGrammar | None = KINDS[answer].grammar(wh)
    return grammar


def with_grammar(s: Sampling, grammar: SqlGrammar | None) -> Sampling:
    """``s`` constrained by ``grammar`` (unchanged without one)."""
    if grammar is None:
        return s
    return dataclasses.replace(s, structured="grammar", schema_json=None, grammar=grammar.text)


def probe_grammar(base_url: str, model: str, api_key: str, grammar: SqlGrammar, *, timeout_s: float = 120.0
                  ) -> str:
    """One short request constrained by ``grammar``; its text, or :class:`InputError` with the
    server's reason when it refuses the grammar (or the structured-outputs request itself)."""
    body = {"model": model, "max_tokens": PROBE_TOKENS, "temperature": 0.0,
            "messages": [{"role": "user", "content": "Write one SQL SELECT statement."}],
            "structured_outputs": {"grammar": grammar.text}}
    req = urllib.request.Request(base_url.rstrip("/") + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {api_key}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 — the run's own endpoint
            answer = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        raise InputError(f"the server refuses the warehouse's SQL grammar (sha256 {grammar.sha256[:12]}): "
                         f"HTTP {exc.code}: {detail}", field="--answer") from None
    except (urllib.error.URLError, TimeoutError, ValueError) as exc:
        raise InputError(f"the SQL-grammar probe request failed: {exc}", field="--answer") from None
    try:
        return str(answer["choices"][0]["message"]["content"] or "")
    except (KeyError, IndexError, TypeError):
        raise InputError("the SQL-grammar probe got an answer without choices", field="--answer") from None
