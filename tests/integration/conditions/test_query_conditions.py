"""The conditions ported to the v2 answer (``--answer query``): worker engines, value linking,
self-consistency, ``--abstain-below``, guardrails on MetricFlow queries -- each on the fault
suite's fake server (deterministic scripted answers), v1 records unchanged elsewhere."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, script

from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.records.store import iter_records
from nlq2sql.run.config import EvalConfig, LoadShape
from nlq2sql.run.live import run_eval

MODEL = "fake-model"
TIMING = {"latency_s", "ttft_s", "itl_mean_s", "itl_max_s", "started", "chunks", "attempts", "retry_waits_s"}
HELDOUT_V2 = PROJECT_ROOT / "evalsets" / "heldout-v2.jsonl"
UNANSWERABLE = PROJECT_ROOT / "evalsets" / "unanswerable.jsonl"


def lines(path: Path, n: int) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()[:n]]


def v2_set(tmp: Path) -> tuple[Path, list[dict[str, Any]]]:
    """Eight answerable items and three unanswerable ones of retail's shipped v2 sets."""
    items = lines(HELDOUT_V2, 8) + lines(UNANSWERABLE, 3)
    path = tmp / "v2.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in items))
    return path, items


def results(out: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: {k: v for k, v in r.items() if k not in TIMING} for r in iter_records(out / "records.jsonl")}


def scripted_answers(items: list[dict[str, Any]]) -> dict[str, str]:
    """Gold for even items, the first item's gold for odd ones, an abstention for one unanswerable
    item and a (wrong) query for the others: right, wrong and abstained answers all occur."""
    out = {}
    for i, it in enumerate(items):
        if it["gold"] is None:
            out[it["question"]] = (json.dumps({"unanswerable": "no such data"}) if i % 2 else
                                   json.dumps(items[0]["gold"]))
        else:
            out[it["question"]] = json.dumps(it["gold"] if i % 2 == 0 else items[0]["gold"])
    return out


def run_v2(tmp: Path, name: str, evalset: Path, answers: dict[str, str], **kw: Any) -> dict[str, Any]:
    with FakeServer(tmp / f"fake-{name}", script(answers=answers), model=MODEL, delay_s=0.02) as f:
        return run_eval(EvalConfig(evalset=str(evalset), out=tmp / name, endpoint=f.url, model=MODEL,
                                   answer="query", concurrency=4, timeout_s=30.0,
                                   load=LoadShape(metrics_interval_s=0.1), **({"guardrails": ()} | kw))).to_json()


@pytest.mark.parametrize("engine", ["local", pytest.param("ray", marks=pytest.mark.slow)])
def test_workers_write_the_records_one_process_writes_for_the_v2_answer(engine: str, tmp_path: Path) -> None:
    """``--workers 2 --answer query`` (worker processes, or Ray actors): the answer kind travels to
    the workers, and each record (scored by rows, abstentions judged) equals the in-process run's."""
    evalset, items = v2_set(tmp_path)
    answers = scripted_answers(items)
    one = run_v2(tmp_path, "single", evalset, answers)
    two = run_v2(tmp_path, "workers", evalset, answers, workers=2, engine=engine)
    single, got = results(tmp_path / "single"), results(tmp_path / "workers")
    assert got.keys() == single.keys() and len(got) == len(items)
    for item_id, rec in single.items():
        assert got[item_id] == rec, item_id
    assert {r["answer"] for r in got.values()} == {"query"}
    assert one["final_accuracy"] == two["final_accuracy"] and 0 < one["final_accuracy"]["k"] < len(items)
    assert one["abstention"] == two["abstention"] and two["abstention"]["abstained"] >= 1
    manifest = json.loads((tmp_path / "workers" / "manifest.json").read_text())
    assert manifest["answer"] == "query" and manifest["engine"] == {"name": engine, "workers": 2, "ray_address": None}


# -- self-consistency and abstention on v2 --------------------------------------------------------
CAT = None


def catalog() -> Any:
    global CAT
    if CAT is None:
        from nlq2sql.semantic import load_catalog

        CAT = load_catalog("retail")
    return CAT


GOLD = {"metrics": ["revenue", "orders"], "group_by": ["customer_id__region", "channel_id__channel"],
        "where": [{"field": "customer_id__region", "op": "in", "values": ["North", "South"]}]}
SAME = {"group_by": ["channel_id__channel", "customer_id__region"], "metrics": ["orders", "revenue"],  # reordered
        "where": [{"field": "customer_id__region", "op": "in", "values": ["South", "North"]}], "order_by": None,
        "limit": None}
OTHER = {"metrics": ["units"], "group_by": ["customer_id__region"]}


def test_vote_over_canonical_v2_queries_with_abstentions_as_votes() -> None:
    from nlq2sql.conditions.selfcheck import vote

    t = json.dumps
    v = vote([t(GOLD), t(SAME), t(OTHER)], catalog(), "query")
    assert (v.winner, v.votes, v.valid, v.distinct, v.tie) == (0, 2, 3, 2, False)
    no = [t({"unanswerable": "no cost data"}), t(OTHER), t({"unanswerable": "we hold no margins"})]
    v = vote(no, catalog(), "query")
    assert (v.winner, v.votes, v.distinct) == (0, 2, 2)  # two reasons, one abstention vote
    v = vote([t(GOLD), t(OTHER), "not json", t({"metrics": ["nope"]})], catalog(), "query")
    assert v.tie and v.valid == 2
    # the v1 vote is unchanged: a v2 text is no intent
    assert vote([t(GOLD)], catalog()).winner is None




def test_query_evidence_reads_answering_then_the_first_metric() -> None:
    import math

    from nlq2sql.conditions.confidence import query_evidence

    metrics = tuple(catalog().metrics)
    lp = math.log
    answered = [('{"', lp(0.99), []), ("metrics", lp(0.8), [("metrics", lp(0.8)), ("un", lp(0.2))]),
                ('":["', lp(1.0), []), ("rev", lp(0.6), [("rev", lp(0.6)), ("units", lp(0.3)), ("@@", lp(0.1))]),
                ('enue"]}', lp(1.0), [])]
    ev = query_evidence(answered, metrics)
    assert ev is not None and ev.over == "metric" and ev.kind == "revenue"
    assert ev.answer_share == 0.8 and ev.confidence == round(0.8 * round(0.6 / 0.9, 4), 4)
    assert set(ev.to_json()) == {"over", "kind", "token", "token_index", "p_token", "kinds", "confidence",
                                 "answer_share"}  # as the record writes it
    abstained = [('{"un', lp(0.7), [('{"un', lp(0.7)), ('{"metrics', lp(0.3))]), ('answerable":"x"}', 0.0, [])]
    ev = query_evidence(abstained, metrics)
    assert ev is not None and ev.over == "answer" and ev.kind == "unanswerable" and ev.confidence == 0.7
    assert set(ev.to_json()) == {"over", "kind", "token", "token_index", "p_token", "kinds", "confidence"}
    assert query_evidence(None, metrics) is None and query_evidence([("oops", 0.0, [])], metrics) is None


def test_samples_and_abstain_on_the_v2_answer_against_the_fake_server(tmp_path: Path) -> None:
    """Three samples per item: a majority of equal queries written differently answers; two
    abstentions out-vote a query; three different queries abstain -- on an answerable item that is
    wrong, on an unanswerable one right (declining is what it asks)."""
    from nlq2sql.answers.offline import rescore_run
    from nlq2sql.conditions.registry import REGISTRY
    from nlq2sql.transport.client import Sampling

    items = [{"id": "a", "question": "Revenue and orders by region and channel for North and South", "gold": GOLD,
              "answerable": True, "category": "breakdown"},
             {"id": "b", "question": "Gross margin by region?", "gold": None, "answerable": False,
              "category": "unanswerable"},
             {"id": "c", "question": "Units by region", "gold": OTHER, "answerable": True, "category": "breakdown"},
             {"id": "d", "question": "Shelf space by region?", "gold": None, "answerable": False,
              "category": "unanswerable"}]
    path = tmp_path / "v2.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in items))
    t = json.dumps
    abstain = t({"unanswerable": "no such data"})
    by_q = {items[0]["question"]: [t(GOLD), t(OTHER), t(SAME)],
            items[1]["question"]: [abstain, t(OTHER), t({"unanswerable": "no margin data"})],
            items[2]["question"]: [t(GOLD), t(OTHER), abstain],
            items[3]["question"]: [t(GOLD), t(OTHER), t(SAME | {"limit": 3})]}
    with FakeServer(tmp_path / "fake", script(by_question={q: [{"kind": "text", "text": x} for x in xs]
                                                           for q, xs in by_q.items()}), model=MODEL) as fake:
        summary = run_eval(EvalConfig(evalset=str(path), out=tmp_path / "run", endpoint=fake.url, model=MODEL,
                                      answer="query", guardrails=(), concurrency=2, timeout_s=30.0,
                                      conditions=REGISTRY.from_options(samples=3, abstain=True),
                                      sampling=Sampling(temperature=0.7, max_tokens=256),
                                      load=LoadShape(metrics_interval_s=0.05))).to_json()
        assert len(fake.chat_requests()) == 12
    recs = {r["id"]: r for r in iter_records(tmp_path / "run" / "records.jsonl")}
    a, b, c, d = (recs[k] for k in "abcd")
    assert a["votes"]["votes"] == 2 and not a["abstained"] and a["correct_final"]
    assert b["votes"]["votes"] == 2 and b["unanswerable"] is not None and b["correct_final"] and not b["abstained"]
    assert c["votes"]["distinct"] == 3 and c["abstained"] and not c["correct_final"]
    assert d["votes"]["distinct"] == 3 and d["abstained"] and d["correct_final"]  # declined: right
    assert summary["final_accuracy"]["k"] == 3
    assert summary["abstention"]["abstained"] == 3 and summary["abstention"]["precision"]["k"] == 2
    assert summary["abstention"]["recall"]["k"] == 2
    sel = summary["selective"]  # declining an unanswerable item is covered and right, as saying so is
    assert (sel["abstained_unanswerable"], sel["coverage"]["k"], sel["accuracy_answered"]["k"]) == (2, 3, 3)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["samples"] == 3 and manifest["abstain"] is True and manifest["answer"] == "query"
    again, _, final_ok = rescore_run(tmp_path / "run", ())  # decided again from the recorded votes
    assert final_ok == {"a": True, "b": True, "c": False, "d": True}
    assert again.abstention is not None and again.abstention.to_json() == summary["abstention"]


def test_abstain_below_on_the_v2_answer_records_its_evidence(tmp_path: Path) -> None:
    """``--abstain-below`` with ``--answer query``: logprobs are asked for, each answer's evidence
    (answering, then its first metric) is recorded and judged against the threshold."""
    from nlq2sql.conditions.registry import REGISTRY

    evalset, items = v2_set(tmp_path)
    summary = run_v2(tmp_path, "below", evalset, scripted_answers(items),
                     conditions=REGISTRY.from_options(abstain_below=0.5))
    recs = list(iter_records(tmp_path / "below" / "records.jsonl"))
    manifest = json.loads((tmp_path / "below" / "manifest.json").read_text())
    assert manifest["abstain_below"] == 0.5 and manifest["sampling"]["top_logprobs"]
    kinds = {r["intent_evidence"]["over"] for r in recs}
    assert kinds == {"metric", "answer"}  # queries and abstentions both read
    # the fake server offers no alternative that names another metric: the model is sure
    assert all(r["intent_evidence"]["confidence"] == 1.0 and not r["abstained"] for r in recs)
    assert summary["selective"]["without_logprob_evidence"] == 0


# -- value linking and guardrails on v2 -----------------------------------------------------------
PHONE = {"field": "channel_id__channel", "op": "neq", "values": ["Phone"]}
GUARDED = [  # (question, gold, the model's answer): each wrong in the way one rule repairs
    ("Revenue by region excluding the Phone channel",
     {"metrics": ["revenue"], "group_by": ["customer_id__region"], "where": [PHONE]},
     {"metrics": ["revenue"], "group_by": ["customer_id__region"], "where": [PHONE | {"op": "eq"}]}),
    ("Units by category", {"metrics": ["units"], "group_by": ["product_id__category"]},
     {"metrics": ["units"], "group_by": ["product_id__category"], "order_by": [{"field": "units", "descending": True}],
      "limit": 3}),
    ("The 2 categories with the fewest units",
     {"metrics": ["units"], "group_by": ["product_id__category"], "order_by": [{"field": "units", "descending": False}],
      "limit": 2},
     {"metrics": ["units"], "group_by": ["product_id__category"], "order_by": [{"field": "units", "descending": True}],
      "limit": 2}),
    ("Orders by channel in North and South",  # right already: no rule may touch it
     {"metrics": ["orders"], "group_by": ["channel_id__channel"],
      "where": [{"field": "customer_id__region", "op": "in", "values": ["North", "South"]}]},
     {"metrics": ["orders"], "group_by": ["channel_id__channel"],
      "where": [{"field": "customer_id__region", "op": "in", "values": ["South", "North"]}]}),
]


def guarded_set(tmp: Path) -> Path:
    path = tmp / "guarded.jsonl"
    path.write_text("".join(json.dumps({"id": f"g{i}", "question": q, "gold": g, "answerable": True,
                                        "category": "breakdown"}) + "\n" for i, (q, g, _) in enumerate(GUARDED)))
    return path


def test_value_links_are_where_items_and_the_hint_names_them() -> None:
    from nlq2sql.semantic import open_warehouse
    from nlq2sql.stages.query_guard import link_where, where_hint
    from nlq2sql.stages.value_links import ValueIndex

    wh = open_warehouse("retail")
    idx = ValueIndex(wh)
    got = [w.model_dump(mode="json") for w in link_where(idx.link("Orders by channel in North and South in 2025, "
                                                                  "excluding the Phone channel"), wh.catalog)]
    assert {"field": "customer_id__region", "op": "in", "values": ["North", "South"]} in got
    assert {"field": "metric_time__day", "op": "between", "values": ["2025-01-01", "2025-12-31"]} in got
    assert PHONE in got and len(got) == 3
    assert where_hint([]) == "" and '"op":"in"' in where_hint(link_where(idx.link("North and South"), wh.catalog))


def test_guardrails_and_value_linking_on_the_v2_answer_live(tmp_path: Path) -> None:
    """``--answer query --guardrails ranking,sort --link-values both`` on the fake server: the
    prompt carries the linked values as where items, each rule repairs its item (raw wrong, final
    right), the right answer is left alone, and precision and recall per rule are the summary's;
    re-scoring without guardrails gives back the raw answers' accuracy."""
    from nlq2sql.answers.offline import rescore_run
    from nlq2sql.conditions.registry import REGISTRY
    from nlq2sql.semantic import open_warehouse
    from nlq2sql.stages.query_guard import link_where, where_hint
    from nlq2sql.stages.value_links import ValueIndex

    wh = open_warehouse("retail")
    idx = ValueIndex(wh)
    sent_as = {q: q + where_hint(link_where(idx.link(q), wh.catalog)) for q, _, _ in GUARDED}
    assert sent_as[GUARDED[0][0]] != GUARDED[0][0]  # the Phone channel is linked
    answers = {sent_as[q]: json.dumps(a) for q, _, a in GUARDED}
    summary = run_v2(tmp_path, "guarded", guarded_set(tmp_path), answers, guardrails=("ranking", "sort"),
                     conditions=REGISTRY.from_options(link_values="both"))
    recs = {r["question"]: r for r in iter_records(tmp_path / "guarded" / "records.jsonl")}
    fired = {q: [iv["rule"] for iv in recs[q]["interventions"]] for q, _, _ in GUARDED}
    assert fired == {GUARDED[0][0]: ["values:op"], GUARDED[1][0]: ["false_ranking"], GUARDED[2][0]: ["sort_asc"],
                     GUARDED[3][0]: []}
    assert recs[GUARDED[0][0]]["linked_values"] == [PHONE]
    for q, _, _ in GUARDED[:3]:
        assert not recs[q]["correct_raw"] and recs[q]["correct_final"], q
        assert all(iv["correct"] for iv in recs[q]["interventions"])
    assert summary["raw_accuracy"]["k"] == 1 and summary["final_accuracy"]["k"] == 4
    assert summary["interventions"] == 3 and summary["intervention_precision"]["k"] == 3
    for rule in ("values:op", "false_ranking", "sort_asc"):
        assert summary["rules"][rule]["recall"] == {**summary["rules"][rule]["recall"], "k": 1, "n": 1}, rule
    manifest = json.loads((tmp_path / "guarded" / "manifest.json").read_text())
    assert manifest["guardrails"] == ["ranking", "sort", "values"] and manifest["link_values"] == "both"
    bare, raw_ok, final_ok = rescore_run(tmp_path / "guarded", ())
    assert bare.final_accuracy.k == 1 and raw_ok == final_ok


# -- the two-stage planner on v2 ------------------------------------------------------------------
def test_planner_stages_for_the_v2_answer() -> None:
    """Stage one chooses among the derived kinds; stage two's schema is the run's v2 schema cut to
    that kind, with abstaining kept, so a generated answer cannot be another kind (an older run's
    ``unanswerable`` choice keeps the abstention alone)."""
    import jsonschema

    from nlq2sql.answers.kinds import bind_sampling
    from nlq2sql.conditions.planner import stage_one, stage_two
    from nlq2sql.transport.client import Sampling

    base = bind_sampling(Sampling(), catalog(), "query")
    one = stage_one(base, ("breakdown", "top_n_by_metric", "time_series", "unanswerable"))
    assert one.structured == "choice" and one.choices is not None and "unanswerable" in one.choices
    ts = {"metrics": ["units"], "group_by": ["metric_time__month"], "where": [], "order_by": [], "limit": None}
    top = {"metrics": ["units"], "group_by": ["product_id__category"], "where": [],
           "order_by": [{"field": "units", "descending": True}], "limit": 2}
    flat = {**top, "order_by": [], "limit": None}
    no = {"unanswerable": "no cost data"}
    valid = {kind: jsonschema.Draft202012Validator(json.loads(stage_two(base, catalog(), kind, "query").schema_json
                                                              or "{}"))
             for kind in ("breakdown", "top_n_by_metric", "time_series", "unanswerable")}
    accepts = {kind: [name for name, x in (("ts", ts), ("top", top), ("flat", flat), ("no", no)) if v.is_valid(x)]
               for kind, v in valid.items()}
    assert accepts == {"breakdown": ["flat", "no"], "top_n_by_metric": ["top", "no"], "time_series": ["ts", "no"],
                       "unanswerable": ["no"]}


def test_planner_on_the_v2_answer_against_the_fake_server(tmp_path: Path) -> None:
    """Two requests per item (the kind, asked in words, then the query); a chosen ``unanswerable``
    abstains; with ``--abstain`` an item whose chosen kind a guardrail overrules abstains."""
    from nlq2sql.conditions.planner import KIND_QUESTION
    from nlq2sql.conditions.registry import REGISTRY

    items = [{"id": "t", "question": "Top 2 categories by units", "gold": GUARDED[2][1] | {
              "order_by": [{"field": "units", "descending": True}]}, "answerable": True, "category": "top_n"},
             {"id": "u", "question": "Units by category", "gold": GUARDED[1][1], "answerable": True,
              "category": "breakdown"},
             {"id": "n", "question": "Gross margin by region?", "gold": None, "answerable": False,
              "category": "unanswerable"}]
    path = tmp_path / "v2.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in items))
    ranked = {"metrics": ["units"], "group_by": ["product_id__category"],
              "order_by": [{"field": "units", "descending": True}], "limit": 2}
    by_q = {"Top 2 categories by units": ["top_n_by_metric", json.dumps(ranked)],
            "Units by category": ["top_n_by_metric", json.dumps(ranked | {"limit": 3})],  # the rule undoes it
            "Gross margin by region?": ["breakdown", json.dumps({"unanswerable": "no cost data"})]}
    with FakeServer(tmp_path / "fake", script(by_question={q: [{"kind": "text", "text": x} for x in xs]
                                                           for q, xs in by_q.items()}), model=MODEL) as fake:
        summary = run_eval(EvalConfig(evalset=str(path), out=tmp_path / "run", endpoint=fake.url, model=MODEL,
                                      answer="query", guardrails=("ranking",), concurrency=1, timeout_s=30.0,
                                      conditions=REGISTRY.from_options(planner="two-stage", abstain=True),
                                      load=LoadShape(metrics_interval_s=0.05))).to_json()
        requests = fake.chat_requests()
        assert len(requests) == 6
    # Stage one's system message is the prompt's plus the kind question; stage two's is the prompt's.
    systems = [r["system_prompt_sha256"] for r in requests]
    assert len(set(systems)) == 2 and systems.count(systems[0]) == 3
    from nlq2sql.semantic.binding import open_warehouse
    from nlq2sql.stages.prompt import load_prompt

    man = json.loads((tmp_path / "run" / "manifest.json").read_text())
    prompt = load_prompt(man["prompt"], man["prompt_style"], open_warehouse("retail")).messages("x")[0]["content"]
    assert {hashlib.sha256(prompt.encode()).hexdigest(),
            hashlib.sha256((prompt + KIND_QUESTION).encode()).hexdigest()} == set(systems)
    recs = {r["id"]: r for r in iter_records(tmp_path / "run" / "records.jsonl")}
    assert [recs[k]["planner_choice"] for k in "tun"] == ["top_n_by_metric", "top_n_by_metric", "breakdown"]
    assert all(r["requests"] == 2 for r in recs.values())
    assert recs["t"]["correct_final"] and not recs["t"]["abstained"]
    assert recs["u"]["interventions"][0]["rule"] == "false_ranking" and recs["u"]["abstained"]
    assert recs["u"]["abstain_reason"] == "planner chose top_n_by_metric, guardrail made it breakdown"
    assert recs["n"]["correct_final"] and recs["n"]["unanswerable"] == "no cost data"
    assert recs["n"].get("abstain_reason") is None  # the model abstained: no guardrail overruled a kind
    assert summary["final_accuracy"]["k"] == 2
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["planner"] == "two-stage"


def test_the_values_repair_on_where_items() -> None:
    """drop a value the question never names (an ``in`` list trimmed), flip the polarity the wording
    asks for, add a named value to the item of its field (eq North + South → in), never a second
    eq item on one field (that would match no row)."""
    from nlq2sql.semantic import open_warehouse
    from nlq2sql.semantic.contract import parse_answer
    from nlq2sql.stages.query_guard import apply_query_guardrails
    from nlq2sql.stages.rulesets import load_guardrails

    wh = open_warehouse("retail")
    rs = load_guardrails(["values"], wh.catalog, wh)

    def repair(question: str, where: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
        q = parse_answer(json.dumps({"metrics": ["orders"], "group_by": ["channel_id__channel"], "where": where}),
                         wh.catalog)
        final, ivs = apply_query_guardrails(rs, q, question, wh.catalog)  # type: ignore[arg-type]
        return [w.model_dump(mode="json") for w in final.where or ()], [iv.rule for iv in ivs]

    region = "customer_id__region"
    assert repair("Orders by channel in North and South", [{"field": region, "op": "eq", "values": ["North"]}]) == (
        [{"field": region, "op": "in", "values": ["North", "South"]}], ["values:add"])
    assert repair("Orders by channel in the North", [{"field": region, "op": "in", "values": ["North", "West"]}]) == (
        [{"field": region, "op": "in", "values": ["North"]}], ["values:drop"])
    assert repair("Orders by channel outside the North and South regions",
                  [{"field": region, "op": "in", "values": ["North", "South"]}])[1] == []  # "outside": not a cue
    assert repair("Orders by channel, excluding North and South",
                  [{"field": region, "op": "in", "values": ["North", "South"]}]) == (
        [{"field": region, "op": "not_in", "values": ["North", "South"]}], ["values:op"])
    assert repair("Orders by channel", []) == ([], [])
