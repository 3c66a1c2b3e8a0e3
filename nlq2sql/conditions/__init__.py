"""Conditions: named, recorded steps between the prompt and the guardrail (issue 11), registered
as plugins (:mod:`nlq2sql.conditions.registry`; how to add one: ``docs/conditions.md``).

Each condition is an option of ``eval``/``matrix`` recorded in the manifest (and per item
where it chooses something per item), so a run says exactly what the model was shown.  The
built-ins register here, in the order their hooks run and their manifest keys are written.
"""

# isort: off
# The order of registration (not alphabetical): hooks run and manifest keys are written in it.
from nlq2sql.conditions import examples  # noqa: F401
from nlq2sql.conditions import planner  # noqa: F401
from nlq2sql.conditions import values  # noqa: F401
from nlq2sql.conditions import linking  # noqa: F401
from nlq2sql.conditions import selfcheck  # noqa: F401
from nlq2sql.conditions import abstain  # noqa: F401
# isort: on
from nlq2sql.conditions.example_bank import ExampleBank, load_bank

__all__ = ["ExampleBank", "load_bank"]
