"""Conditions: named, recorded steps between the prompt and the guardrail (issue 11).

Each condition is an option of ``eval``/``matrix`` recorded in the manifest (and per item
where it chooses something per item), so a run says exactly what the model was shown.
"""

from nlq2sql.conditions.examples import ExampleBank, load_bank

__all__ = ["ExampleBank", "load_bank"]
