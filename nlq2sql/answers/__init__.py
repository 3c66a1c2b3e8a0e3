"""How a model answers beyond the v1 intent: v2 queries scored offline, direct SQL (sandboxed), unscored questions."""

__all__: list[str] = []
