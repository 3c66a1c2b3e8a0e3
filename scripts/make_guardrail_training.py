"""Write the learned guardrail's training set: ``guardrails/training/ranking-train.jsonl``.

Recipe (deterministic: same code → same bytes; ``--check`` verifies the committed file):

1. **Templates × vocabulary × phrasings.**  For each shipped warehouse (retail, tpch,
   flights) a hand-written vocabulary of metric phrasings (with whether the metric is a
   count, and whether higher is better), dimension nouns (singular/plural) and filter
   phrases; ``RANKING`` and ``BREAKDOWN`` templates, each with the label it implies and its
   cues — ``row_count`` (a count written in the question, or 1 for a singular superlative
   such as "which region had the most …") and ``sort`` (``desc``/``asc``; every ranking has
   one, a breakdown only when the question asks for an order).  The templates include the
   phrasings that fool word lists: "top-line"/"topline"/"top-level" (breakdown),
   "first ten rows"/"N rows" (a breakdown with a row count), "descending", "from highest to
   lowest", "most to least", "rank every X by Y" (a sorted breakdown), "bottom-line"
   (breakdown) against "which X had the most", "leading", "bottom N", "best-selling",
   "number one", "top-line … for the top 3 …" (rankings).  Each template is instantiated
   ``PER_TEMPLATE`` times per warehouse with ``random.Random(SEED)`` choosing the metric,
   dimension, filter, count (digits or words) and a phrasing wrapper (a prefix such as
   "can you pull", a suffix such as "pls" or "?", capitalisation).
2. **A hand-written part** (``HAND``): questions written by hand in the shipped sets' loose
   style ("gimme", "asap", typos of register), for all three warehouses.
3. **Disjoint from every shipped set.**  Any candidate whose normalised text (lower case,
   punctuation → spaces; :func:`nlq2sql.stages.learned_guardrail.normalise_question`) equals a
   question of ``evalsets/*.jsonl`` or ``warehouses/*/evalsets/*.jsonl`` is dropped, as are
   duplicates within the set (first kept); the counts dropped are printed.
   ``tests/integration/conditions/test_learned_guardrail.py`` asserts the disjointness on the committed file.

The templates were written by someone who had read the shipped sets (as were the lexical
``ranking`` rules' cues): the adversarial sets are therefore not a blind test of either
guardrail; see docs/learned-guardrail.md.

    .venv/bin/python scripts/make_guardrail_training.py [--out PATH] [--check]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nlq2sql.stages.learned_guardrail import normalise_question  # noqa: E402
from nlq2sql.stages.learned_training import shipped_questions  # noqa: E402

OUT = ROOT / "guardrails" / "training" / "ranking-train.jsonl"
SEED = 11
PER_TEMPLATE = 4


@dataclass(frozen=True)
class Metric:
    phrases: tuple[str, ...]
    count: bool  # "the most X" reads well (else "the highest X")
    polarity: int  # +1 higher is better, -1 lower is better, 0 neither


@dataclass(frozen=True)
class Dim:
    one: str
    many: str


@dataclass(frozen=True)
class Vocab:
    name: str
    metrics: tuple[Metric, ...]
    dims: tuple[Dim, ...]
    filters: tuple[str, ...]


VOCABS = (
    Vocab("retail",
          (Metric(("revenue", "sales", "net sales", "turnover"), False, 1),
           Metric(("orders", "order count", "number of orders"), True, 1),
           Metric(("units", "units sold", "quantity sold", "items sold"), True, 1),
           Metric(("average order value", "AOV", "avg basket size"), False, 1),
           Metric(("customers", "distinct customers", "buyers", "shoppers"), True, 1)),
          (Dim("region", "regions"), Dim("segment", "segments"), Dim("category", "categories"),
           Dim("product category", "product categories"), Dim("product", "products"),
           Dim("channel", "channels"), Dim("sales channel", "sales channels")),
          (" in 2024", " in 2025", " for the Online channel", " in the West region",
           " for Furniture", " excluding the Partner channel", " for the Consumer segment",
           " in Electronics", " for the Phone channel in 2025", " outside the South region")),
    Vocab("tpch",
          (Metric(("revenue", "sales", "net revenue"), False, 1),
           Metric(("orders", "order count", "number of orders"), True, 1),
           Metric(("quantity", "units shipped", "quantity ordered"), True, 1),
           Metric(("average discount", "avg discount", "discount"), False, 0),
           Metric(("line items", "line item count"), True, 1),
           Metric(("customers", "customer count"), True, 1),
           Metric(("revenue per order", "average revenue per order"), False, 1)),
          (Dim("order priority", "order priorities"), Dim("order status", "order statuses"),
           Dim("ship mode", "ship modes"), Dim("return flag", "return flags"),
           Dim("market segment", "market segments"), Dim("nation", "nations"),
           Dim("country", "countries"), Dim("customer region", "customer regions"),
           Dim("brand", "brands"), Dim("part manufacturer", "part manufacturers"),
           Dim("supplier nation", "supplier nations"), Dim("supplier region", "supplier regions")),
          (" in 1995", " in 1997", " for AUTOMOBILE customers", " in the EUROPE region",
           " excluding RAIL", " for Manufacturer#3", " for 1-URGENT orders", " for Brand#23",
           " from MACHINERY customers in 1994", " excluding 5-LOW orders", " for SHIP shipments")),
    Vocab("flights",
          (Metric(("flights", "number of flights", "flight count", "departures"), True, 0),
           Metric(("cancelled flights", "cancellations"), True, -1),
           Metric(("cancellation rate",), False, -1),
           Metric(("average departure delay", "avg dep delay", "mean departure delay"), False, -1),
           Metric(("average arrival delay", "avg arrival delay"), False, -1),
           Metric(("longest departure delay", "maximum departure delay"), False, -1),
           Metric(("total distance", "miles flown", "distance flown"), False, 0),
           Metric(("distinct aircraft", "aircraft count", "distinct tail numbers"), True, 0)),
          (Dim("airline", "airlines"), Dim("carrier", "carriers"), Dim("origin airport", "origin airports"),
           Dim("origin", "origins"), Dim("destination", "destinations"), Dim("day of the week", "days of the week"),
           Dim("weekday", "weekdays"), Dim("aircraft manufacturer", "aircraft manufacturers"),
           Dim("engine type", "engine types")),
          (" out of JFK", " from Newark Liberty Intl", " for Delta Air Lines Inc.", " in 2013",
           " excluding Envoy Air", " into Los Angeles Intl", " out of La Guardia", " for JetBlue Airways",
           " on BOEING aircraft", " into Hartsfield Jackson Atlanta Intl")),
)

NUMBERS = (2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 20)
WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 10: "ten",
         12: "twelve", 15: "fifteen", 20: "twenty"}
PREFIXES = ("", "", "", "", "show me ", "can you pull ", "gimme ", "I need ", "quick one: ", "please list ")
#: Templates that open with a question word or a verb take no prefix ("can you pull which …").
VERB_FIRST = {"which", "what", "how", "rank", "list", "show", "give", "break", "just", "bottom"}
SUFFIXES = ("", "", "", "?", " pls", " please", " asap")

# (template id, label, sort, count, text).  count: "n" = the number {n} written in the text,
# "one" = a singular superlative (row_count 1), None = no row count.  sort: "desc" / "asc" /
# "best" / "worst" (resolved by the metric's polarity; skipped when it has none) / None.
# {m} metric phrase, {d} / {ds} dimension singular / plural, {f} filter phrase, {n} count,
# {most} "most" / "highest", "largest" and {least} "fewest", "least" / "lowest", "least",
# "smallest" by the metric's kind.
RANKING: tuple[tuple[str, str | None, str | None, str], ...] = (
    ("r-top-n", "desc", "n", "top {n} {ds} by {m}{f}"),
    ("r-top", "desc", None, "top {ds} by {m}{f}"),
    ("r-bottom-n", "asc", "n", "bottom {n} {ds} by {m}{f}"),
    ("r-bottom", "asc", None, "bottom {ds} for {m}{f}"),
    ("r-which-most", "desc", "one", "which {d} had the {most} {m}{f}?"),
    ("r-which-has-most", "desc", "one", "which {d} has the {most} {m}{f}"),
    ("r-which-least", "asc", "one", "which {d} had the {least} {m}{f}?"),
    ("r-which-n-most", "desc", "n", "which {n} {ds} had the {most} {m}{f}?"),
    ("r-n-with-least", "asc", "n", "the {n} {ds} with the {least} {m}{f}"),
    ("r-leading", "desc", None, "which {ds} are leading on {m}{f}?"),
    ("r-leading-in", "desc", None, "{ds} leading in {m}{f}"),
    ("r-the-leading", "desc", "one", "the leading {d} for {m}{f}"),
    ("r-leads", "desc", "one", "which {d} leads on {m}{f}"),
    ("r-best-n", "best", "n", "best {n} {ds} for {m}{f}"),
    ("r-worst-n", "worst", "n", "the {n} worst {ds} by {m}{f}"),
    ("r-topline-top", "desc", "n", "top-line {m} for the top {n} {ds}{f}"),
    ("r-bottom-line-which", "desc", "one", "bottom line, which {d} had the {most} {m}?"),
    ("r-number-one", "desc", "one", "number one {d} for {m}{f}"),
    ("r-biggest", "desc", "one", "our biggest {d} by {m}{f}"),
    ("r-weakest-n", "asc", "n", "the {n} weakest {ds} on {m}{f}"),
    ("r-strongest", "desc", "one", "which {d} is strongest on {m}{f}?"),
    ("r-highest-dash", "desc", "n", "{n} highest-{m} {ds}"),
    ("r-rank-top-n", "desc", "n", "rank the top {n} {ds} by {m}{f}"),
    ("r-largest-n", "desc", "n", "what are the {n} largest {ds} by {m}{f}?"),
    ("r-with-most", "desc", "one", "{d} with the {most} {m}{f}"),
    ("r-smallest-n", "asc", "n", "the smallest {n} {ds} by {m}{f}"),
    ("r-lowest-n", "asc", "n", "lowest {n} {ds} by {m}{f}"),
    ("r-highest-n", "desc", "n", "the {n} {ds} with the highest {m}{f}"),
    ("r-top-ranked", "desc", None, "top-ranked {ds} by {m}{f}"),
    ("r-single-least", "asc", "one", "the single {d} with the {least} {m}{f}"),
)
BREAKDOWN: tuple[tuple[str, str | None, str | None, str], ...] = (
    ("b-by", None, None, "{m} by {d}{f}"),
    ("b-per", None, None, "{m} per {d}{f}"),
    ("b-each", None, None, "{m} for each {d}{f}"),
    ("b-break-down", None, None, "break down {m} by {d}{f}"),
    ("b-split", None, None, "how does {m} split across {ds}{f}?"),
    ("b-topline", None, None, "top-line {m} by {d}{f}"),
    ("b-topline-per", None, None, "topline {m} per {d}{f}"),
    ("b-top-level", None, None, "top-level view of {m} by {d}{f}"),
    ("b-first-rows", None, "n", "show the first {n} rows of {m} by {d}{f}"),
    ("b-n-rows", None, "n", "give me {n} rows of {m} per {d}{f}"),
    ("b-n-lines", None, "n", "just {n} lines of {m} by {d}{f}"),
    ("b-only-rows", None, "n", "show only {n} rows of {m} by {d}{f}"),
    ("b-descending", "desc", None, "{m} by {d}, descending"),
    ("b-desc-order", "desc", None, "{m} by {d}{f} in descending order"),
    ("b-sorted-high-low", "desc", None, "{m} by {d}{f}, sorted from highest to lowest"),
    ("b-list-high-low", "desc", None, "list the {ds} from highest to lowest {m}{f}"),
    ("b-low-high", "asc", None, "{m} by {d}{f}, lowest to highest"),
    ("b-ascending", "asc", None, "{m} by {d}, ascending"),
    ("b-most-least", "desc", None, "every {d}'s {m}, most to least"),
    ("b-rank-every", "desc", None, "rank every {d} by {m}{f}"),
    ("b-ranked-by", "desc", None, "{ds} ranked by {m}{f}"),
    ("b-highest-first", "desc", None, "list every {d} with its {m}, highest first"),
    ("b-smallest-first", "asc", None, "{m} by {d}{f}, smallest first"),
    ("b-bottom-line", None, None, "bottom-line {m} by {d}{f}"),
    ("b-across-all", None, None, "{m} across all {ds}{f}"),
    ("b-mix", None, None, "what does the {d} mix look like for {m}{f}?"),
    ("b-most-recent", None, None, "{m} by {d} for the most recent year"),
    ("b-breakdown-of", None, None, "the {d} breakdown of {m}{f}"),
    ("b-all-fewest-first", "asc", None, "all {ds} by {m}, fewest first"),
    ("b-full-list", None, None, "full list of {ds} with their {m}{f}"),
)

# Hand-written: (label, sort, row_count, question).
HAND: tuple[tuple[str, str | None, int | None, str], ...] = (
    ("ranking", "desc", 1, "which region brought in the most money last year, 2024?"),
    ("ranking", "desc", 3, "who are our 3 biggest customer segments by revenue"),
    ("ranking", "asc", 1, "which channel is lagging furthest behind on orders?"),
    ("ranking", "desc", None, "what are the best sellers in Apparel by units"),
    ("ranking", "desc", 5, "five products that drove the most revenue in 2025"),
    ("ranking", "asc", 2, "the 2 segments with the smallest average order value"),
    ("ranking", "desc", 1, "which category is our cash cow on revenue?"),
    ("ranking", "desc", 10, "ten best-selling products this year (2025) by units"),
    ("ranking", "desc", 1, "where do the most orders come from, region-wise?"),
    ("ranking", "asc", 3, "bottom three products on units for the Retail channel"),
    ("ranking", "desc", None, "highest earning channels, revenue-wise"),
    ("ranking", "desc", 1, "which segment tops the chart for customers?"),
    ("ranking", "desc", 4, "4 categories with the strongest AOV"),
    ("ranking", "asc", 1, "our least popular channel by distinct customers"),
    ("ranking", "desc", 1, "which nation had the largest revenue in 1996?"),
    ("ranking", "desc", 3, "name the 3 ship modes carrying the most quantity"),
    ("ranking", "asc", 1, "which order priority has the smallest revenue per order"),
    ("ranking", "desc", None, "leading supplier nations for line items"),
    ("ranking", "desc", 2, "top two market segments on customer count in ASIA"),
    ("ranking", "asc", 5, "the 5 brands that sold the least quantity in 1993"),
    ("ranking", "desc", 1, "which customer region generates the most revenue per order?"),
    ("ranking", "desc", 6, "6 biggest nations by number of orders, 1998 only"),
    ("ranking", "desc", None, "which countries rank highest on revenue?"),
    ("ranking", "asc", 1, "which return flag has the fewest line items"),
    ("ranking", "desc", 1, "which carrier flies the most miles?"),
    ("ranking", "asc", 3, "3 airlines with the lowest cancellation rate out of Newark"),
    ("ranking", "desc", 1, "what's the worst airport for departure delays?"),
    ("ranking", "desc", 5, "five busiest destinations from La Guardia"),
    ("ranking", "asc", 1, "which day of the week has the fewest flights?"),
    ("ranking", "desc", 2, "two manufacturers whose planes fly the most distance"),
    ("ranking", "asc", None, "most punctual airlines on departures"),
    ("ranking", "desc", 1, "which origin airport cancels the most flights in February?"),
    ("ranking", "desc", 3, "top three engine types by distinct aircraft"),
    ("ranking", "asc", 1, "the airline with the shortest average arrival delay into Atlanta"),
    ("ranking", "desc", 8, "8 destinations with the most cancellations"),
    ("ranking", "desc", 1, "which weekday sees the longest departure delay?"),
    ("ranking", "desc", None, "the heaviest-flown routes' destinations by miles"),
    ("ranking", "desc", 1, "who carried the most flights out of JFK, which airline?"),
    ("ranking", "desc", 3, "podium: the 3 regions with the most units"),
    ("ranking", "asc", 4, "the four slowest-moving categories by units"),
    ("breakdown", None, None, "how much revenue did each region bring in during 2025?"),
    ("breakdown", None, None, "split orders out by channel for me"),
    ("breakdown", None, None, "what's the AOV for every customer segment"),
    ("breakdown", "desc", None, "units by category, biggest first"),
    ("breakdown", None, 10, "first 10 rows of revenue by product please"),
    ("breakdown", None, None, "top-line number of customers per region"),
    ("breakdown", "desc", None, "channels by revenue, descending please"),
    ("breakdown", None, None, "give me the revenue picture by segment"),
    ("breakdown", None, None, "orders per category, Online only"),
    ("breakdown", "asc", None, "all products by units, from lowest to highest"),
    ("breakdown", None, None, "revenue for every product in Grocery"),
    ("breakdown", None, 5, "just the first five rows of orders by product"),
    ("breakdown", None, None, "what's the split of quantity across ship modes?"),
    ("breakdown", None, None, "top-line revenue by nation for 1996"),
    ("breakdown", "desc", None, "nations sorted by customer count, high to low"),
    ("breakdown", None, None, "line items per return flag"),
    ("breakdown", None, None, "how are the order priorities doing on revenue?"),
    ("breakdown", None, 20, "20 rows of quantity per brand"),
    ("breakdown", "desc", None, "supplier regions by revenue in descending order please"),
    ("breakdown", None, None, "average discount for each market segment in 1995"),
    ("breakdown", None, None, "orders by order status"),
    ("breakdown", "asc", None, "revenue per order by market segment, ascending"),
    ("breakdown", None, None, "flights by carrier out of JFK"),
    ("breakdown", None, None, "cancellation rate for each origin airport"),
    ("breakdown", "desc", None, "airlines by miles flown, most to least"),
    ("breakdown", None, 3, "show me 3 rows of average arrival delay by airline"),
    ("breakdown", None, None, "top-line distinct aircraft per engine type"),
    ("breakdown", None, None, "what's the average departure delay on each weekday"),
    ("breakdown", "asc", None, "destinations by flights, lowest first"),
    ("breakdown", None, None, "how many cancellations did each manufacturer's planes have?"),
    ("breakdown", "desc", None, "origins ranked by cancellation rate, all of them"),
    ("breakdown", None, None, "longest departure delay seen at each origin airport"),
    ("breakdown", None, None, "bottom-line flight counts by destination"),
    ("breakdown", None, None, "flights per airline for the most recent year"),
    ("breakdown", None, 12, "a dozen rows of total distance by destination"),
    ("breakdown", None, None, "total distance by airline, JetBlue Airways excluded"),
    ("breakdown", None, None, "topline cancellations by weekday"),
    ("breakdown", "desc", None, "every airline with its cancellation rate, largest first"),
    ("breakdown", None, None, "how is revenue distributed over the sales channels?"),
    ("breakdown", None, None, "customers in each category, 2025"),
    ("breakdown", None, 10, "the first ten rows of cancellations by origin airport"),
    ("breakdown", None, 10, "only the first ten rows of revenue per brand, please"),
    ("ranking", "asc", 1, "which carrier flew the least miles in 2013?"),
    ("ranking", "desc", 1, "which segment spent the most, revenue-wise, in 2024?"),
)


def _render(template: str, rng: random.Random, vocab: Vocab, metric: Metric, n: int | None) -> str:
    dim = rng.choice(vocab.dims)
    flt = rng.choice(vocab.filters) if rng.random() < 0.4 else ""
    num = "" if n is None else (WORDS[n] if rng.random() < 0.35 else str(n))
    text = template.format(m=rng.choice(metric.phrases), d=dim.one, ds=dim.many, f=flt, n=num,
                           most="most" if metric.count else rng.choice(("highest", "largest")),
                           least=rng.choice(("fewest", "least") if metric.count else ("lowest", "least", "smallest")))
    prefix = rng.choice(PREFIXES)
    if template.split(" ", 1)[0] not in VERB_FIRST:
        text = prefix + text
    suffix = rng.choice(SUFFIXES)
    if suffix and not text.endswith("?"):
        text += suffix
    if rng.random() < 0.4:
        text = text[0].upper() + text[1:]
    return text


def _sort(sort: str | None, metric: Metric) -> str | None | bool:
    """The sort cue; False when the template does not fit the metric (best/worst of a metric
    with no better direction)."""
    if sort in ("best", "worst"):
        if metric.polarity == 0:
            return False
        return "desc" if (metric.polarity > 0) == (sort == "best") else "asc"
    return sort


def generated(rng: random.Random) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for vocab in VOCABS:
        for label, templates in (("ranking", RANKING), ("breakdown", BREAKDOWN)):
            for tid, sort, count, template in templates:
                made = tries = 0
                while made < PER_TEMPLATE and tries < 50:
                    tries += 1
                    metric = rng.choice(vocab.metrics)
                    resolved = _sort(sort, metric)
                    if resolved is False:
                        continue
                    n = rng.choice(NUMBERS) if count == "n" else None
                    row: dict[str, Any] = {"id": f"{vocab.name}-{tid}-{made + 1}",
                                           "question": _render(template, rng, vocab, metric, n),
                                           "label": label}
                    if count is not None:
                        row["row_count"] = n if count == "n" else 1
                    if resolved is not None:
                        row["sort"] = resolved
                    row["source"] = f"template:{tid}"
                    row["warehouse"] = vocab.name
                    rows.append(row)
                    made += 1
    return rows


def hand() -> list[dict[str, Any]]:
    rows = []
    for i, (label, sort, row_count, question) in enumerate(HAND, start=1):
        row: dict[str, Any] = {"id": f"hand-{i:03d}", "question": question, "label": label}
        if row_count is not None:
            row["row_count"] = row_count
        if sort is not None:
            row["sort"] = sort
        row["source"] = "hand"
        rows.append(row)
    return rows


def build() -> tuple[list[dict[str, Any]], Counter[str]]:
    shipped = {normalise_question(q) for q in shipped_questions().values()}
    seen: set[str] = set()
    dropped: Counter[str] = Counter()
    out = []
    for row in generated(random.Random(SEED)) + hand():
        key = normalise_question(row["question"])
        if key in shipped:
            dropped["shipped"] += 1
        elif key in seen:
            dropped["duplicate"] += 1
        else:
            seen.add(key)
            out.append(row)
    return out, dropped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="exit 1 if the file differs from what this script writes")
    args = ap.parse_args(argv)
    rows, dropped = build()
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    labels = Counter(r["label"] for r in rows)
    sources = Counter("hand" if r["source"] == "hand" else "template" for r in rows)
    summary = (f"{len(rows)} questions ({', '.join(f'{k} {v}' for k, v in sorted(labels.items()))}; "
               f"{sources['template']} from templates, {sources['hand']} hand-written); dropped "
               f"{dropped['shipped']} equal to a shipped question, {dropped['duplicate']} duplicates")
    if args.check:
        current = args.out.read_text() if args.out.is_file() else None
        if current != text:
            print(f"{args.out} is stale: run scripts/make_guardrail_training.py", file=sys.stderr)
            return 1
        print(f"{args.out}: current; {summary}")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
