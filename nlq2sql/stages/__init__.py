"""The stages an item goes through: eval set, prompt, intent, guardrails, SQL, execution, scoring, report."""

__all__: list[str] = []
