"""The seed's experiments as commands: quality under load, compact vs pretty, the
prompt × guardrail matrix, and comparison reports.  Built on the core; the core never
imports this package."""

__all__: list[str] = []
