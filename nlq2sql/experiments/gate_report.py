"""The regression gate's outputs (Markdown for people, JUnit XML for CI, JSON for programs), each made
from the typed ``GateResult`` alone."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from nlq2sql.experiments.gate import Flip, GateResult, RunInfo
from nlq2sql.records.results import LEGACY_WAREHOUSE
from nlq2sql.records.store import output_dir

__all__ = ["render_junit", "render_markdown", "write_outputs"]


def _run_line(label: str, r: RunInfo) -> str:
    g = "+".join(r.guardrails) or "none"
    who = r.model or (f"{r.kind} run (no model recorded)" if r.kind else "?")
    return (f"- **{label}**: `{r.path}` — {who} · prompt {r.prompt or '?'} · guardrails {g} · "
            f"{r.evalset or '?'} on {r.semantic_model or LEGACY_WAREHOUSE} · n={r.n}")


def _cell(text: str | None) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")


def render_markdown(res: GateResult) -> str:
    failed = res.failed
    head = "PASS" if res.verdict == "pass" else f"FAIL ({len(failed)} check(s): " + \
        ", ".join(c.id for c in failed) + ")"
    lines = [f"# Regression gate: {head}", "",
             _run_line("baseline", res.baseline), _run_line("candidate", res.candidate),
             f"- paired items: {res.paired}", "",
             "| check | result | numbers |", "|---|---|---|"]
    lines += [f"| {c.title} (`{c.id}`) | **{c.status}** | {_cell(c.detail)} |" for c in res.checks]
    sections: tuple[tuple[Flip, str], ...] = (("right_to_wrong", "Flipped right → wrong"),
                                              ("wrong_to_right", "Flipped wrong → right"))
    for flip, title in sections:
        rows = res.flipped(flip)
        lines += ["", f"## {title} ({len(rows)})", ""]
        if rows:
            lines += ["| id | question | baseline error | candidate error |", "|---|---|---|---|"]
            lines += [f"| {i.id} | {_cell(i.question)} | {i.baseline_error or 'correct'} | "
                      f"{i.candidate_error or 'correct'} |" for i in rows]
        else:
            lines.append("none")
    return "\n".join(lines) + "\n"


_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _x(text: str | None) -> str:
    """Text XML 1.0 can carry: characters it forbids (controls, lone surrogates) become U+FFFD."""
    return _NOT_XML.sub("\ufffd", text or "")


def render_junit(res: GateResult) -> str:
    """JUnit XML: one suite of gate checks, one suite with a test case per paired item, named by
    its id; an item fails when it flipped right → wrong (or, with ``require_identical``, when
    its output bytes changed).  Checks that were not measured or not judged are ``skipped``."""
    root = ET.Element("testsuites", name="nlq2sql gate")
    checks = ET.SubElement(root, "testsuite", name="gate checks")
    for c in res.checks:
        tc = ET.SubElement(checks, "testcase", classname="gate", name=c.id, time="0")
        detail = _x(c.detail)
        if c.status == "fail":
            ET.SubElement(tc, "failure", message=detail, type=c.id).text = detail
        elif c.status in ("not measured", "not checked"):
            ET.SubElement(tc, "skipped", message=f"{c.status}: {detail}")
        ET.SubElement(tc, "system-out").text = detail
    items = ET.SubElement(root, "testsuite", name="items")
    for i in res.items:
        tc = ET.SubElement(items, "testcase", classname="items", name=_x(i.id), time="0")
        msgs = []
        if i.flip == "right_to_wrong":
            msgs.append(f"right → wrong: candidate error {i.candidate_error or '?'}")
        if res.config.require_identical and not i.identical:
            msgs.append("raw_text changed (--require-identical)")
        if msgs:
            msg = _x("; ".join(msgs))
            ET.SubElement(tc, "failure", message=msg, type=i.flip).text = \
                f"{msg}\nquestion: {_x(i.question)}"
        elif i.flip == "wrong_to_right":
            ET.SubElement(tc, "system-out").text = "wrong → right"
    for suite in (checks, items):
        cases = suite.findall("testcase")
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(sum(tc.find("failure") is not None for tc in cases)))
        suite.set("skipped", str(sum(tc.find("skipped") is not None for tc in cases)))
        suite.set("errors", "0")
    root.set("tests", str(sum(int(s.get("tests", "0")) for s in (checks, items))))
    root.set("failures", str(sum(int(s.get("failures", "0")) for s in (checks, items))))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_outputs(res: GateResult, out: Path) -> dict[str, Path]:
    """``gate.md``, ``junit.xml`` and ``gate.json`` (the typed result) under ``out``."""
    output_dir(out)
    paths = {"markdown": out / "gate.md", "junit": out / "junit.xml", "json": out / "gate.json"}
    for key, text in (("markdown", render_markdown(res)), ("junit", render_junit(res)),
                      ("json", res.model_dump_json(indent=2) + "\n")):
        tmp = paths[key].with_name(paths[key].name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(paths[key])
    return paths
