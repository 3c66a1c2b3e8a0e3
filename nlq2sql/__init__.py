"""nlq2sql: evaluate structured-output text-to-SQL on batched LLM endpoints.

The public API is small: load an eval set, score raw answers, run live evaluations.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
