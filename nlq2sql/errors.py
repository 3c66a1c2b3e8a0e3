"""One exception root with a subclass per stage.

A failed *item* is a recorded outcome, not an exception that escapes the run; these
exceptions carry the stage so the runner can classify what went wrong, and the CLI
can turn bad *input* into one clear message with exit code 2.
"""

from __future__ import annotations

__all__ = ["ClientError", "EvalSetError", "ExcludedObjectError", "ExecutionError", "GuardrailError", "InputError",
           "IntentError", "Nlq2SqlError", "QueryTimeoutError", "RecordError", "SemanticModelError", "ServerError",
           "SqlBuildError"]


class Nlq2SqlError(Exception):
    """Root of every error nlq2sql raises on purpose."""


class InputError(Nlq2SqlError):
    """Bad user input: a file, line and field can be named. CLI exit code 2."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        self.path, self.line, self.field = path, line, field
        where = ""
        if path is not None:
            where = str(path)
            if line is not None:
                where += f":{line}"
            if field is not None:
                where += f": field '{field}'"
            where += ": "
        elif field is not None:
            where = f"{field}: "
        super().__init__(where + message)


class EvalSetError(InputError):
    """An eval set file is malformed or its gold intents are invalid."""


class GuardrailError(InputError):
    """A guardrail rule set cannot be loaded."""


class IntentError(Nlq2SqlError):
    """Raw model output could not become a valid intent; carries the status."""

    def __init__(self, status: str, reason: str) -> None:
        self.status, self.reason = status, reason
        super().__init__(f"{status}: {reason}")


class SqlBuildError(Nlq2SqlError):
    """A canonical intent could not be turned into SQL (should not happen for valid intents)."""


class ExcludedObjectError(SqlBuildError):
    """A query names an object a partial semantic layer excluded for a data problem (the message
    says which and why)."""


class ExecutionError(Nlq2SqlError):
    """DuckDB failed or timed out on a built query."""


class QueryTimeoutError(ExecutionError):
    """A built query ran past its time limit (``timeout_s``): slow, not wrong."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(f"query exceeded {timeout_s:g}s timeout")
        self.timeout_s = timeout_s


class ClientError(Nlq2SqlError):
    """The endpoint call failed; ``outcome`` is the classified failure class."""

    def __init__(self, outcome: str, message: str, *, retryable: bool = False,
                 status_code: int | None = None) -> None:
        self.outcome, self.retryable, self.status_code = outcome, retryable, status_code
        super().__init__(f"{outcome}: {message}")


class ServerError(Nlq2SqlError):
    """A local vLLM server could not be provisioned, started or stopped."""


class RecordError(InputError):
    """A run directory cannot be written, read or resumed."""


class SemanticModelError(InputError):
    """A semantic model (dbt Semantic Layer YAML) is malformed or does not resolve."""
