"""A warehouse nobody shipped, built from scratch by the tests: a lending library.

A team's own DuckDB file and their own dbt Semantic Layer YAML (split over two files, as
dbt projects write it), used to prove that nothing of a warehouse is hard-coded: eval-set
checks, scoring, ``sql --execute`` and a live eval run on it without touching the code.
Two loans reference a book the catalogue lacks, so a LEFT JOIN's NULL group is visible.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

MODELS_YML = """\
semantic_models:
  - name: loans
    description: One row per loan of a book to a member.
    model: ref('loans')
    defaults:
      agg_time_dimension: loan_date
    entities:
      - name: loan
        type: primary
        expr: loan_id
      - name: book
        type: foreign
        expr: book_id
      - name: member
        type: foreign
        expr: member_id
    dimensions:
      - name: loan_date
        type: time
        type_params:
          time_granularity: day
      - name: channel
        type: categorical
        expr: "CASE WHEN online THEN 'online' ELSE 'desk' END"
    measures:
      - name: loan_count
        agg: count
        expr: "1"
      - name: late_days
        agg: sum
        expr: days_late
      - name: fees
        agg: sum
        expr: fee
      - name: borrowers
        agg: count_distinct
        expr: member_id
  - name: books
    description: The catalogue.
    model: ref('books')
    entities:
      - name: book
        type: primary
        expr: book_id
    dimensions:
      - name: genre
        type: categorical
      - name: author
        type: categorical
"""

METRICS_YML = """\
semantic_models:
  - name: members
    model: ref('members')
    entities:
      - name: member
        type: primary
        expr: member_id
    dimensions:
      - name: city
        type: categorical
      - name: plan
        type: categorical
        expr: membership_plan
metrics:
  - name: loans
    label: Loans
    type: simple
    type_params:
      measure: loan_count
  - name: late_days
    label: Days late
    type: simple
    type_params:
      measure: late_days
  - name: fees
    label: Late fees
    type: simple
    type_params:
      measure: fees
  - name: borrowers
    label: Borrowers
    type: simple
    type_params:
      measure: borrowers
  - name: loans_per_borrower
    label: Loans per borrower
    type: ratio
    type_params:
      numerator: loans
      denominator: borrowers
"""

GENRES = ("Fantasy", "History", "Poetry", "Science")
CITIES = ("Leeds", "York", "Hull")


def build_db(path: Path) -> Path:
    """The library's data: deterministic, small, with two loans of an uncatalogued book."""
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE books (book_id INTEGER, genre VARCHAR, author VARCHAR)")
    con.executemany("INSERT INTO books VALUES (?, ?, ?)",
                    [(i, GENRES[i % 4], f"Author {i % 5}") for i in range(1, 21)])
    con.execute("CREATE TABLE members (member_id INTEGER, city VARCHAR, membership_plan VARCHAR)")
    con.executemany("INSERT INTO members VALUES (?, ?, ?)",
                    [(i, CITIES[i % 3], "student" if i % 4 == 0 else "adult") for i in range(1, 31)])
    con.execute("CREATE TABLE loans (loan_id INTEGER, book_id INTEGER, member_id INTEGER, loan_date DATE, "
                "days_late INTEGER, fee DECIMAL(6,2), online BOOLEAN)")
    rows = [(i, 1 + (i * 7) % 20, 1 + (i * 11) % 30, f"{2023 + i % 2}-{1 + i % 12:02d}-{1 + i % 27:02d}",
             (i * 3) % 9, round(((i * 3) % 9) * 0.25, 2), i % 3 == 0) for i in range(1, 201)]
    rows += [(201, 99, 1, "2024-03-03", 2, 0.5, False), (202, 99, 2, "2024-04-04", 0, 0.0, True)]
    con.executemany("INSERT INTO loans VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    con.close()
    return path


def write_model(folder: Path) -> Path:
    """The semantic model as a dbt project would hold it: two files in one folder."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "loans.yml").write_text(MODELS_YML)
    (folder / "members_and_metrics.yml").write_text(METRICS_YML)
    return folder


def _intent(intent: str, metric: str, dimension: str | None, grain: str | None = None,
            filters: list[dict[str, str]] | None = None, limit: int | None = None,
            order: str | None = None) -> dict[str, object]:
    return {"intent": intent, "metric": metric, "dimension": dimension, "time_grain": grain,
            "filters": filters or [], "limit": limit, "order": order}


CASES = [
    ("lib-1", "How many loans per genre?", _intent("breakdown", "loans", "genre"), "breakdown"),
    ("lib-2", "Top 2 cities by late fees", _intent("top_n_by_metric", "fees", "city", limit=2, order="desc"), "top_n"),
    ("lib-3", "Monthly loans in 2024", _intent("time_series", "loans", None, "month",
                                               [{"field": "year", "op": "eq", "value": "2024"}]), "time_series"),
    ("lib-4", "Days late by membership plan for Poetry books",
     _intent("breakdown", "late_days", "plan", filters=[{"field": "genre", "op": "eq", "value": "Poetry"}]),
     "breakdown"),
    ("lib-5", "Which borrowing channel has the fewest borrowers?",
     _intent("top_n_by_metric", "borrowers", "channel", limit=1, order="asc"), "top_n"),
    ("lib-6", "Loans per borrower by city", _intent("breakdown", "loans_per_borrower", "city"), "breakdown"),
]


def write_evalset(path: Path) -> Path:
    path.write_text("".join(json.dumps({"id": i, "question": q, "gold": g, "category": c}) + "\n"
                            for i, q, g, c in CASES))
    return path
