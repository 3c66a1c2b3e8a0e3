"""Retrieved few-shot (``--examples K``): the condition around the bank (:mod:`.example_bank`).

The v1 and query arms take the bank's solutions as written; the SQL arms take them as solved
SQL (:mod:`.sql_examples`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from pydantic import Field

from nlq2sql.answers.kinds import answer_kind
from nlq2sql.conditions.example_bank import ExampleBank, ExamplesManifest, load_bank
from nlq2sql.conditions.registry import Condition, Messages, Settings, register
from nlq2sql.conditions.sql_examples import sql_bank
from nlq2sql.conditions.trace import Trace
from nlq2sql.records.manifest_parts import Part

if TYPE_CHECKING:
    from nlq2sql.records.typed import JsonValue
    from nlq2sql.semantic.binding import Warehouse
    from nlq2sql.stages.sets import AnySet

__all__ = ["Examples", "ExamplesSettings", "ExamplesTrace"]


class ExamplesSettings(Settings):
    examples: int = Field(0, ge=0, description="Retrieved few-shot: the K most similar solved questions from "
                          "--example-bank as user/assistant turns (0: none).")
    example_bank: str | None = Field(None, description="Bank of solved questions: a set of the warehouse (default "
                                     "dev), 'synthetic' (generated from the semantic layer and data: the default "
                                     "when the warehouse has no dev set) or a JSONL path; must share no id or "
                                     "question with the set under test.")


class ExamplesTrace(Trace):
    """Per item: the bank ids of the examples shown, nearest first; those among them whose gold
    returns no rows on this data (a synthetic bank's fallback on a tiny layer), where any."""

    example_ids: list[str]
    empty_example_ids: list[str] | None = None


@register
class Examples(Condition[ExamplesSettings]):
    """``--examples K``: the bank's K nearest solved questions as turns before the question;
    the bank's identity in the manifest, the chosen ids in each record (``example_ids``)."""

    name = "examples"
    settings_model = ExamplesSettings
    answers = frozenset({"intent", "query", "sql", "sql-grammar"})  # the SQL arms: solved SQL (.sql_examples)
    manifest_keys = ("examples",)
    manifest_types = {"examples": ExamplesManifest}
    label_rank = 10.0
    trace = ExamplesTrace
    bank: ExampleBank | None = None

    @property
    def on(self) -> bool:
        return self.settings.examples > 0  # a bank named without --examples is not used

    def load(self, wh: Warehouse, answer: str) -> None:
        if answer_kind(answer).writes_sql:
            self.bank = sql_bank(self.settings.example_bank, wh, self.settings.examples)
            return
        self.bank = load_bank(self.settings.example_bank, wh, self.settings.examples, answer)

    def check_against(self, evalset: AnySet) -> None:
        assert self.bank is not None
        self.bank.check_disjoint(evalset)

    def manifest(self) -> Part:
        bank = self.bank
        return self.manifest_part().model_validate(
            {"examples": bank.manifest(self.settings.examples) if bank is not None else None})

    @classmethod
    def label(cls, manifest: Mapping[str, JsonValue]) -> str | None:
        ex = manifest.get("examples")
        return f"{ex['k']} examples" if ex else None

    def before(self, question: str, messages: Messages) -> tuple[Messages, ExamplesTrace]:
        assert self.bank is not None
        messages, ids = self.bank.messages(messages, question, self.settings.examples)
        empty = [i for i in ids if i in self.bank.empty_ids]
        return messages, (ExamplesTrace(example_ids=ids, empty_example_ids=empty) if empty
                          else ExamplesTrace(example_ids=ids))
