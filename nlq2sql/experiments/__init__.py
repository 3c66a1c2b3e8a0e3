"""Experiments as commands: quality under load, compact vs pretty, the prompt × guardrail matrix,
comparison reports. Built on the core; the core never imports this package."""

__all__: list[str] = []
