"""defog's sql-eval questions → the ``defog_*`` warehouses' gold-SQL eval sets, checked on DuckDB.

Reads ``data/questions_gen_postgres.csv`` and ``data/idk.csv`` from a git repository of
``defog-ai/sql-eval`` at a commit (``git show``), converts every row
(:mod:`nlq2sql.stages.sqleval_import`), builds each database from the installed ``defog-data``
package, runs every converted gold in the SQL arm's sandbox (read-only, guarded) and writes:

- ``warehouses/defog_<db>/evalsets/sql-eval.jsonl`` and ``idk.jsonl``: the lines whose golds run
  and return rows (alternatives that fail on DuckDB are dropped from the line, with their reason
  in the import report);
- ``warehouses/defog_<db>/evalsets/README.md``: where the questions come from and their licence;
- ``reports/defog/import.json`` and ``import.md``: per source row what was shipped, dropped or
  excluded, and why.

Deterministic: the same commit and the same ``defog-data`` give the same files.
Usage: python scripts/import_defog.py GIT_DIR [COMMIT]   (COMMIT default: HEAD)
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

from nlq2sql.answers.sql.sandbox import Sandbox
from nlq2sql.semantic.warehouse import build, connect_read_only
from nlq2sql.stages.sqleval_import import PINNED_DATE, Converted, convert_row, read_csv

PROJECT = Path(__file__).resolve().parent.parent
SOURCE_REPO = "defog-ai/sql-eval"
FILES = {"sql-eval": "data/questions_gen_postgres.csv", "idk": "data/idk.csv"}
#: The databases the ``defog-data`` package (0.1.1) ships, each a warehouse ``defog_<db>``.
DATABASES = ("academic", "advising", "atis", "geography", "restaurants", "scholar", "yelp")


def schema_of(db: Path) -> dict[str, dict[str, str]]:
    """table → column → DuckDB type, for sqlglot's type annotation."""
    con = connect_read_only(db)
    try:
        out: dict[str, dict[str, str]] = defaultdict(dict)
        for t, c, ty in con.execute("SELECT table_name, column_name, data_type FROM information_schema.columns "
                                    "ORDER BY table_name, ordinal_position").fetchall():
            out[t][c] = ty
        return dict(out)
    finally:
        con.close()


def check(conv: Converted, sandbox: Sandbox) -> tuple[list[str], list[dict[str, str]]]:
    """The alternatives that run and return rows, and the dropped ones with their reason."""
    kept: list[str] = []
    dropped: list[dict[str, str]] = []
    for sql in conv.gold_sql:
        res = sandbox.execute(sql)
        if not res.ok:
            dropped.append({"sql": sql, "reason": f"{res.status}: {res.reason}"})
        elif not res.rows:
            dropped.append({"sql": sql, "reason": "returns no rows"})
        else:
            kept.append(sql)
    return kept, dropped


def main(git_dir: str, commit: str = "HEAD") -> None:
    sha = subprocess.run(["git", "-C", git_dir, "rev-parse", commit], check=True, capture_output=True,
                         text=True).stdout.strip()
    report: list[dict[str, object]] = []
    shipped: dict[tuple[str, str], list[dict[str, object]]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        dbs = {db: build(Path(tmp) / f"{db}.duckdb", name=f"defog_{db}") for db in DATABASES}
        schemas = {db: schema_of(p) for db, p in dbs.items()}
        sandboxes = {db: Sandbox(p) for db, p in dbs.items()}
        for set_name, path in FILES.items():
            text = subprocess.run(["git", "-C", git_dir, "show", f"{sha}:{path}"], check=True, capture_output=True,
                                  text=True).stdout
            counters: Counter[str] = Counter()
            for row in read_csv(text, path):
                entry: dict[str, object] = {"set": set_name, "source": f"{path}:{row.line}", "db": row.db_name,
                                            "category": row.category}
                if row.db_name not in dbs:
                    entry |= {"status": "excluded", "reason": "its database is not in defog-data 0.1.1"}
                    report.append(entry)
                    continue
                counters[row.db_name] += 1
                item_id = (f"{row.db_name}-{counters[row.db_name]:03d}" if set_name == "sql-eval"
                           else f"{row.db_name}-idk-{counters[row.db_name]:03d}")
                conv = convert_row(row, item_id, schemas[row.db_name])
                kept, dropped = check(conv, sandboxes[row.db_name])
                entry |= {"id": item_id, "alternatives": len(conv.gold_sql), "kept": len(kept),
                          "dropped": dropped, "problems": conv.problems, "tags": conv.tags}
                if kept:
                    conv.gold_sql = kept
                    shipped[(row.db_name, set_name)].append(conv.line())
                    entry["status"] = "shipped"
                else:
                    entry["status"] = "excluded"
                    entry["reason"] = "no alternative runs on DuckDB and returns rows"
                report.append(entry)
        for sb in sandboxes.values():
            sb.close()
    for db in DATABASES:
        folder = PROJECT / "warehouses" / f"defog_{db}" / "evalsets"
        folder.mkdir(parents=True, exist_ok=True)
        for set_name in FILES:
            lines = shipped[(db, set_name)]
            (folder / f"{set_name}.jsonl").write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
        (folder / "README.md").write_text(readme(db, sha))
    out = PROJECT / "reports" / "defog"
    out.mkdir(parents=True, exist_ok=True)
    meta = {"source": f"https://github.com/{SOURCE_REPO}", "commit": sha, "files": FILES, "licence": "Apache-2.0",
            "pinned_date": PINNED_DATE, "databases": "defog-data 0.1.1 (PyPI)", "rows": report}
    (out / "import.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
    (out / "import.md").write_text(import_markdown(meta))
    print(import_markdown(meta))


def readme(db: str, sha: str) -> str:
    return f"""# defog sql-eval questions for `{db}`

`sql-eval.jsonl` and `idk.jsonl` are converted from the public repository
[{SOURCE_REPO}](https://github.com/{SOURCE_REPO}) at commit `{sha}`:
`{FILES['sql-eval']}` (rows with `db_name` = `{db}`) and `{FILES['idk']}` (questions the database
cannot answer, with the instruction naming the literal answer). Licence of the source: Apache-2.0
(Copyright defog.ai); the questions are defog's, converted (not edited) by `scripts/import_defog.py`:

- gold SQL transpiled from PostgreSQL to DuckDB by sqlglot; defog's `;`-separated alternatives and
  `{{a, b}}` "either column" lists expanded into the list of acceptable golds (`gold_sql`);
- `CURRENT_DATE` / `NOW()` pinned to {PINNED_DATE} (tag `relative-date`; the question says which day is today);
- defog's `instructions` appended to the question (tag `instructions`);
- `ordered` false everywhere (defog's comparison sorts both results before comparing); tag `defog-order`
  marks the items defog sorts by their ORDER BY columns.

What was dropped or excluded, and why: `reports/defog/import.md`. The database is defog's own, from the
`defog-data` package (PyPI 0.1.1), built by `../build.py`.
"""


def import_markdown(meta: dict[str, object]) -> str:
    rows = meta["rows"]
    assert isinstance(rows, list)
    lines = ["# defog sql-eval import", "",
             f"Source: {meta['source']} at `{meta['commit']}` ({meta['licence']}); databases: {meta['databases']}; "
             f"relative dates pinned to {meta['pinned_date']}.", "",
             "| set | database | rows | shipped | excluded | alternatives | alternatives dropped | relative-date |",
             "|---" * 8 + "|"]
    keys = sorted({(r["set"], r["db"]) for r in rows})
    for s, db in keys:
        rs = [r for r in rows if (r["set"], r["db"]) == (s, db)]
        lines.append(f"| {s} | {db} | {len(rs)} | {sum(r['status'] == 'shipped' for r in rs)} | "
                     f"{sum(r['status'] == 'excluded' for r in rs)} | {sum(r.get('alternatives', 0) for r in rs)} | "
                     f"{sum(len(r.get('dropped', [])) for r in rs)} | "
                     f"{sum('relative-date' in r.get('tags', []) for r in rs)} |")
    lines += ["", "## Excluded rows", ""]
    lines += [f"- `{r['source']}` ({r['db']}, {r['category']}): {r['reason']}"
              + "".join(f"; `{d['sql']}` → {d['reason']}" for d in r.get("dropped", []))
              for r in rows if r["status"] == "excluded"] or ["None."]
    lines += ["", "## Alternatives dropped from shipped items", ""]
    lines += [f"- `{r['id']}` (`{r['source']}`): {d['reason']} — `{d['sql']}`" for r in rows
              for d in r.get("dropped", []) if r["status"] == "shipped"] or ["None."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main(*sys.argv[1:])
