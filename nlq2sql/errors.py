"""One exception root with a subclass per stage: a failed *item* is a recorded outcome, not an escaping
exception; the stage lets the runner classify, and the CLI turns bad *input* into one message, exit 2."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["MAX_PROBLEMS", "ClientError", "EvalSetError", "EvalSetProblems", "ExcludedObjectError", "ExecutionError",
           "GuardrailError", "InputError", "IntentError", "Nlq2SqlError", "Problems", "QueryTimeoutError",
           "RecordError", "SemanticModelError", "ServerError", "SqlBuildError"]

#: Problems of one file kept for the report; the rest are counted (a file of a million bad lines
#: is reported in a screenful, not a million lines).
MAX_PROBLEMS = 100


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


class EvalSetProblems(EvalSetError):
    """Every problem of one file, each an :class:`EvalSetError` (file, line, field); the CLI prints
    them one a line and exits 2.  ``more``: problems found past :data:`MAX_PROBLEMS`, counted only."""

    def __init__(self, problems: Sequence[EvalSetError], path: str, more: int = 0) -> None:
        self.problems = list(problems)
        if more:
            self.problems.append(EvalSetError(f"... and {more} more problem(s) not shown", path=path))
        if len(self.problems) == 1:
            first = self.problems[0]
            super().__init__(str(first))
            self.path, self.line, self.field = first.path, first.line, first.field
        else:
            super().__init__(f"{len(self.problems) - (1 if more else 0) + more} problems:\n"
                             + "\n".join(str(p) for p in self.problems), path=path)


class Problems:
    """The problems of one file as a loader finds them, in file order; :meth:`raise_any` raises
    them together (:class:`EvalSetProblems`).  Past :data:`MAX_PROBLEMS` they are only counted."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.found: list[EvalSetError] = []
        self.more = 0

    def add(self, problem: EvalSetError) -> None:
        for p in getattr(problem, "problems", None) or [problem]:
            if len(self.found) < MAX_PROBLEMS:
                self.found.append(p)
            else:
                self.more += 1

    def __bool__(self) -> bool:
        return bool(self.found)

    def __len__(self) -> int:
        return len(self.found) + self.more

    def sorted(self) -> list[EvalSetError]:
        """By line (a problem of the whole file first), stable."""
        return sorted(self.found, key=lambda p: p.line or 0)

    def raise_any(self) -> None:
        if self.found:
            raise EvalSetProblems(self.sorted(), self.path, self.more)


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
