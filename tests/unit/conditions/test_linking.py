"""Schema linking (``--link-schema prompt``, ``nlq2sql.conditions.linking``): deterministic from the
question and the layer, so its recall on a shipped set is measured offline, without a model."""

from __future__ import annotations

import json
import statistics

import pytest

from nlq2sql.conditions.linking import Linked, Linker, Linking, LinkingSettings, recall
from nlq2sql.semantic import open_warehouse
from nlq2sql.semantic.binding import Warehouse
from nlq2sql.semantic.catalog import WAREHOUSE_DIR
from nlq2sql.stages.prompt import load_prompt


@pytest.fixture(scope="module")
def jaffle() -> Warehouse:
    return open_warehouse("jaffle")


def test_a_metric_named_by_its_label_is_linked(jaffle: Warehouse) -> None:
    linker = Linker(jaffle, 600)
    for m in jaffle.catalog.metrics.values():
        if m.label.replace("_", " ").lower() == m.name.replace("_", " "):
            continue  # named by its own name: not the case under test
        linked = linker.link(f"What is the {m.label.lower()} by month?")
        assert m.name in linked.metrics, (m.label, linked.metrics)


def test_recall_counts_names_by_path_and_grain() -> None:
    linked = Linked(metrics=["orders"], group_by=["customer__first_ordered_at", "location__location_name"])
    gold = {"metrics": ["orders", "revenue"], "group_by": ["order__location__location_name", "metric_time__month"],
            "where": [{"field": "customer__first_ordered_at__quarter", "op": "eq", "values": ["x"]}]}
    share, missed = recall(gold, linked)
    assert missed == ["revenue"] and share == pytest.approx(3 / 4)
    assert recall({"metrics": [], "group_by": ["metric_time__day"]}, linked) == (None, [])


def test_linking_recall_on_jaffle_heldout_and_the_shorter_prompt(jaffle: Warehouse) -> None:
    """The figure the docs report: mean recall of the gold's names over the held-out set's answerable
    items, and the linked vocabulary's size against the whole one."""
    cond = Linking(LinkingSettings(link_schema="prompt"))
    cond.load(jaffle, "query")
    prompt = load_prompt("query", "default", jaffle)
    shares, full, short = [], [], []
    for line in (WAREHOUSE_DIR / "jaffle" / "evalsets" / "heldout.jsonl").read_text().splitlines():
        item = json.loads(line)
        if not item.get("gold"):
            continue
        messages, trace = cond.before(item["question"], prompt.messages(item["question"]))
        assert trace.linked_schema is not None
        share, _ = recall(item["gold"], trace.linked_schema)  # type: ignore[arg-type]
        if share is not None:
            shares.append(share)
        full.append(len(prompt.text))
        short.append(len(messages[0]["content"]))
    assert len(shares) > 40
    assert statistics.mean(shares) >= 0.95
    assert statistics.mean(short) < 0.6 * statistics.mean(full)
