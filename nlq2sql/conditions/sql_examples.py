"""Retrieved examples for the SQL arms (``--answer sql|sql-grammar --examples K``): solved SQL.

The same bank and the same retrieval as the query arm (:class:`~nlq2sql.conditions.example_bank.ExampleBank`,
TF-IDF over the questions), but each assistant turn is the bank item's gold written as SQL: the
clean one-line SELECT of :mod:`nlq2sql.answers.sql.solved` where it returns the gold's rows
(checked by executing it when the bank loads), else MetricFlow's compiled SQL with its parameters
inlined.  How many of each is in the manifest (``examples.solutions``).
"""

from __future__ import annotations

from nlq2sql.answers.sql.solved import solved_texts
from nlq2sql.conditions.example_bank import DEFAULT_BANK, ExampleBank, ExamplesManifest
from nlq2sql.errors import InputError
from nlq2sql.semantic.binding import Warehouse
from nlq2sql.stages.queryset import load_query_set

__all__ = ["SqlExampleBank", "sql_bank"]


class SqlExampleBank(ExampleBank):
    """An :class:`ExampleBank` whose solutions are SQL; the manifest says how they were written."""

    styles: dict[str, int]

    def manifest(self, k: int) -> ExamplesManifest:
        part = super().manifest(k)
        part.solutions = {"kind": "sql", **self.styles}
        return part


def sql_bank(name_or_path: str | None, wh: Warehouse, k: int) -> ExampleBank:
    """The bank (a set of the warehouse, default ``dev``, or a JSONL path) with SQL solutions."""
    qs = load_query_set(name_or_path or DEFAULT_BANK, wh.catalog)
    texts, styles = solved_texts(list(qs.cases), wh)
    bank = SqlExampleBank(qs, lambda case: texts[case.id])
    bank.styles = styles
    if k > len(bank.cases):
        raise InputError(f"asks for {k} examples but the bank {qs.name!r} holds {len(bank.cases)}",
                         field="--examples")
    return bank
