"""What every command shares: the app, the one error path (exit codes, one-line messages),
the option types, and the small parsers that turn options into library values.

Command modules import from here and :mod:`nlq2sql.cli._spec`, not from each other (no cycle).
:data:`COMMANDS` names the module registering each top-level command, imported only when that
command runs or its help is asked for, so ``nlq2sql --help`` loads only what it uses."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import math
import sys
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from typer._click import Command, Context, HelpFormatter
from typer._click import exceptions as click_errors  # typer's own (vendored) click
from typer.core import TyperCommand, TyperGroup

from nlq2sql.errors import InputError, Nlq2SqlError
from nlq2sql.inputs import MAX_JSON_DEPTH, MAX_REQUESTS, at_most
from nlq2sql.paths import shipped_warehouses

#: Every top-level command and command group, in the order ``nlq2sql --help`` lists them, with
#: the module of ``nlq2sql.cli`` that registers it on :data:`app` (a new command is added here;
#: ``tests/integration/cli/test_startup.py`` checks the table against what the modules register).
COMMANDS: dict[str, str] = {
    "score": "main", "eval": "main", "serve": "main", "batch": "batch", "load-check": "experiments",
    "compact": "experiments", "matrix": "experiments", "compare": "experiments", "gate": "experiments",
    "sweep": "load", "grid": "load", "capacity": "load", "tune": "tune", "sql": "semantic",
    "backends": "serving", "view": "view", "db": "main", "models": "main", "evalset": "evalsets",
    "examples": "examples", "guardrail": "guardrail", "probe": "load", "semantic": "semantic",
}


def load_command(name: str) -> Command:
    """Import the module that registers top-level command ``name`` and build its click command
    the way typer builds every registered command (its options, defaults and help unchanged)."""
    importlib.import_module(f"nlq2sql.cli.{COMMANDS[name]}")
    for info in app.registered_commands:
        if (info.name or typer.main.get_command_name(getattr(info.callback, "__name__", ""))) == name:
            return typer.main.get_command_from_info(info, pretty_exceptions_short=app.pretty_exceptions_short,
                                                    rich_markup_mode=app.rich_markup_mode)
    for group in app.registered_groups:
        if group.name == name:
            return typer.main.get_group_from_info(group, pretty_exceptions_short=app.pretty_exceptions_short,
                                                  suggest_commands=app.suggest_commands,
                                                  rich_markup_mode=app.rich_markup_mode)
    raise LookupError(f"nlq2sql.cli.{COMMANDS[name]} registers no command {name!r}")


@functools.cache
def _summaries(module: str) -> dict[str, str]:
    """The help text of each top-level command a module registers, read from its source without
    running it: a decorated function's docstring, a sub-app's ``typer.Typer(help=…)``.  What is
    not a plain literal there is left out (the command is then loaded to list it)."""
    tree = ast.parse((Path(__file__).parent / f"{module}.py").read_text(encoding="utf-8"))
    apps: dict[str, str] = {}  # sub-app variable → its help
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                if (isinstance(dec, ast.Call) and isinstance(dec.func, ast.Attribute) and dec.func.attr == "command"
                        and isinstance(dec.func.value, ast.Name) and dec.func.value.id == "app"
                        and not dec.keywords and dec.args and isinstance(dec.args[0], ast.Constant)
                        and (doc := ast.get_docstring(node)) is not None):
                    out[str(dec.args[0].value)] = doc
        elif (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
              and isinstance(node.value, ast.Call)):
            helps = [k.value for k in node.value.keywords if k.arg == "help"]
            if helps and isinstance(helps[0], ast.Constant) and isinstance(helps[0].value, str):
                apps[node.targets[0].id] = helps[0].value
        elif (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
              and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == "add_typer"
              and node.value.args and isinstance(node.value.args[0], ast.Name)
              and node.value.args[0].id in apps):
            names = [k.value for k in node.value.keywords if k.arg == "name"]
            if names and isinstance(names[0], ast.Constant):
                out[str(names[0].value)] = apps[node.value.args[0].id]
    return out


class LazyCommands(MutableMapping[str, Command]):
    """The root group's commands: every name of :data:`COMMANDS` is listed; a command is built
    (its module imported) when it is first looked up.  Walking ``.items()`` builds them all, as
    the docs generator and the tests that inspect every option do."""

    def __init__(self, built: MutableMapping[str, Command]) -> None:
        self.built = dict(built)

    def __getitem__(self, name: str) -> Command:
        if name not in self.built:
            if name not in COMMANDS:
                raise KeyError(name)
            self.built[name] = load_command(name)
        return self.built[name]

    def __setitem__(self, name: str, command: Command) -> None:
        self.built[name] = command

    def __delitem__(self, name: str) -> None:
        del self.built[name]

    def __iter__(self) -> Iterator[str]:
        yield from COMMANDS
        yield from (n for n in self.built if n not in COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS) + sum(n not in COMMANDS for n in self.built)

    def listed(self, name: str) -> Command | None:
        """What the command list shows for ``name``: the command if built, else a stand-in with
        the help its module's source declares (no import); unknown → None."""
        if name in self.built:
            return self.built[name]
        if name not in COMMANDS:
            return None
        text = _summaries(COMMANDS[name]).get(name)
        return TyperCommand(name, help=text) if text is not None else self[name]


class OneLineErrors(TyperGroup):
    """The root group: lazy commands (:class:`LazyCommands`), one-line usage errors.

    Usage errors (a value of the wrong type, an unknown option, a missing argument) print as
    one line, ``error: … (try 'nlq2sql CMD --help')``, exit 2, like every other refusal;
    typer would draw a framed box."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = LazyCommands(self.commands)
        self._listing = False

    def list_commands(self, ctx: Context) -> list[str]:
        return list(self.commands)  # the names only: nothing is imported to list them

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if self._listing and isinstance(self.commands, LazyCommands):
            return self.commands.listed(cmd_name)
        return self.commands.get(cmd_name)

    def format_help(self, ctx: Context, formatter: HelpFormatter) -> None:
        self._listing = True  # the command list needs each command's help, not the command
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             windows_expand_args: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, windows_expand_args, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except click_errors.NoArgsIsHelpError as exc:  # the help (already printed) was the answer
            sys.exit(exc.exit_code)
        except click_errors.ClickException as exc:
            ctx = getattr(exc, "ctx", None)
            hint = f" (try '{ctx.command_path} --help')" if isinstance(exc, click_errors.UsageError) and ctx else ""
            _say_error(exc.format_message() + hint)
            sys.exit(exc.exit_code)
        except typer.Abort:
            err.print("aborted")
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


app = typer.Typer(help="Evaluate structured-output text-to-SQL on batched LLM endpoints.",
                  no_args_is_help=True, pretty_exceptions_enable=False, cls=OneLineErrors)
err = Console(stderr=True)
F = TypeVar("F", bound=Callable[..., Any])


@app.callback()
def _root() -> None:
    # Makes ``app`` a command group before any command module is imported (typer builds a
    # group only for an app with a callback or registered commands); it takes no options.
    pass


def finite_floats(params: dict[str, Any]) -> None:
    """Every float option must be finite: ``nan`` and ``inf`` parse as floats but are never a
    meaningful timeout, rate, threshold or cost.  Checked here, once, on the parsed values of
    every command (an option added later is covered too)."""
    for name, value in params.items():
        for v in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(v, float) and not math.isfinite(v):
                raise InputError(f"must be a finite number, got {v}", field="--" + name.replace("_", "-"))


def _say_error(message: str) -> None:
    # One line, always: a message quoting a file's text may carry line breaks.
    err.print(f"[bold red]error:[/] {escape(' '.join(message.split()))}", highlight=False, soft_wrap=True,
              emoji=False)


def handled(fn: F) -> F:
    """Turn our errors into exit codes: input 2, other failures 1, Ctrl-C 130.

    An ``OSError`` naming a file (a path that is a directory, a FIFO, unreadable, below a
    file, …), a ``UnicodeDecodeError`` and a ``RecursionError`` (input nested ~1,000 deep) are
    input errors too: one line, exit 2, never a traceback, even where a reader has no message
    of its own for them."""
    # Only a command that can resume says so when interrupted (a sweep or a server cannot).
    on_interrupt = ("interrupted: records so far are kept; rerun with --resume"
                    if "resume" in inspect.signature(fn).parameters else "interrupted")

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            finite_floats(kwargs)
            return fn(*args, **kwargs)
        except InputError as exc:
            problems = getattr(exc, "problems", None)  # a report of several problems: one line each
            if problems and len(problems) > 1:
                _say_error(f"{len(problems)} problems:")
                for p in problems:
                    err.print(escape(" ".join(str(p).split())), highlight=False, soft_wrap=True, emoji=False)
            else:
                _say_error(str(exc))
            raise typer.Exit(2) from None
        except UnicodeDecodeError as exc:
            _say_error(f"input is not UTF-8 text: byte 0x{exc.object[exc.start:exc.start + 1].hex()} "
                       f"at offset {exc.start} ({exc.reason})")
            raise typer.Exit(2) from None
        except RecursionError:  # JSON (or YAML) nested ~1,000 deep that a reader did not bound itself
            _say_error("input is nested too deeply to read (arrays or objects inside one another "
                       f"beyond Python's recursion limit; readers accept {MAX_JSON_DEPTH} levels)")
            raise typer.Exit(2) from None
        except OSError as exc:
            if exc.filename is None:
                err.print(f"[bold red]failed:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
                raise typer.Exit(1) from None
            where = f"{exc.filename}" + (f" → {exc.filename2}" if exc.filename2 else "")
            _say_error(f"{where}: {exc.strerror or exc}")
            raise typer.Exit(2) from None
        except Nlq2SqlError as exc:
            err.print(f"[bold red]failed:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            err.print(on_interrupt)
            raise typer.Exit(130) from None
    return wrapper  # type: ignore[return-value]


#: The help panels options are grouped in (``--help``, docs/cli.md).
SPEC_PANEL = "Run spec"
ENDPOINT_PANEL = "Endpoint / server"
LOAD_PANEL = "Load"
OUTPUT_PANEL = "Output"

#: Options shared by every command that touches intents or SQL.
EndpointsOpt = Annotated[list[str] | None, typer.Option(
    "--endpoint", "--base-url", help="OpenAI-compatible base URL (…/v1); give it several times for replicas of "
    "one model (items are routed over all of them). Default: start a local vLLM.", rich_help_panel=ENDPOINT_PANEL)]
EndpointsFileOpt = Annotated[Path | None, typer.Option(
    help="Replicas, one 'URL [MODEL [KEY_ENV]]' per line (with or instead of --endpoint).",
    rich_help_panel=ENDPOINT_PANEL)]
RoutingOpt = Annotated[str, typer.Option(
    help="Several endpoints: least-inflight | round-robin | sticky (by item id: the same replica every run).",
    rich_help_panel=ENDPOINT_PANEL)]


#: The CLI's warehouse when ``--semantic-model`` is not given: chosen here, at the edge (library
#: functions take theirs as an argument, with no default).
CLI_WAREHOUSE = "retail"
SemanticModelOpt = Annotated[str, typer.Option(
    "--semantic-model", help=f"Warehouse semantic model: a shipped name ({', '.join(shipped_warehouses())}) or a "
    "dbt Semantic Layer YAML file/folder.")]
DbOpt = Annotated[Path | None, typer.Option(
    "--db", help="The DuckDB file (or a folder of Parquet/CSV files) the semantic model describes. "
    "Default: the shipped warehouse's cached build.")]


def dbt_options(fn: F) -> F:
    """Give a command the options that say where a dbt project's relations live: ``--db-schema``
    (every relation's schema: overrides the profile), ``--profiles-dir`` and ``--target`` (dbt's,
    for the project's profile); the command receives them as one ``dbt`` argument
    (:class:`~nlq2sql.semantic.dbt_project.DbtOptions`, or None when none is given)."""
    sig = inspect.signature(fn, eval_str=True)
    extra = [
        inspect.Parameter("db_schema", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
            str | None, typer.Option("--db-schema", help="The database schema every relation of the semantic model "
                                     "is in (default: a dbt project's profile target schema with its custom "
                                     "schemas, else main).")]),
        inspect.Parameter("profiles_dir", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
            Path | None, typer.Option("--profiles-dir", help="The folder of the dbt project's profiles.yml "
                                      "(default: $DBT_PROFILES_DIR, the project folder, ~/.dbt).")]),
        inspect.Parameter("dbt_target", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
            str | None, typer.Option("--target", help="The dbt profile's target (default: its target:).")]),
    ]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from nlq2sql.semantic.dbt_project import DbtOptions  # deferred: pydantic, DuckDB; --help loads _common

        db_schema, profiles_dir, target = (kwargs.pop(n, None) for n in ("db_schema", "profiles_dir", "dbt_target"))
        if db_schema is not None and not str(db_schema).strip():
            raise InputError("must name a schema", field="--db-schema")
        given = (db_schema, profiles_dir, target) != (None, None, None)
        dbt = DbtOptions(db_schema, str(profiles_dir) if profiles_dir is not None else None, target) if given else None
        return fn(*args, dbt=dbt, **kwargs)

    params = [p for p in sig.parameters.values() if p.name != "dbt"]
    keyword = [p for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
    params = [p for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD]
    wrapper.__signature__ = sig.replace(parameters=[*params, *extra, *keyword])  # type: ignore[attr-defined]
    wrapper.__annotations__ = {**{p.name: p.annotation for p in params}, **{p.name: p.annotation for p in extra}}
    return wrapper  # type: ignore[return-value]


SearchPathOpt = Annotated[str | None, typer.Option(
    "--search-path", help="Schemas (comma-separated identifiers) unqualified table names in gold and model SQL "
    "resolve in, in order (DuckDB's search_path). Default: the schemas of the semantic layer's relations, the "
    "one holding most of them first.")]


SchemaOpt = Annotated[str, typer.Option(
    "--schema", help="Intent JSON Schema sent to the server: flat (one object; consistency checked in code) "
    "| branches (one anyOf branch per intent kind: inconsistent intents cannot be generated).")]


def guardrail_names(values: list[str] | None) -> tuple[str, ...]:
    names: list[str] = []
    for v in values or ["ranking"]:
        names += [x.strip() for x in v.split(",") if x.strip()]
    return tuple(n for n in names if n != "none")


def parse_levels(text: str, option: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InputError(f"expected comma-separated integers, got {text!r}", field=option) from None
    if not levels or any(v < 1 for v in levels):
        raise InputError(f"every level must be at least 1, got {text!r}", field=option)
    for v in levels:
        at_most(v, MAX_REQUESTS, option)
    return levels


EvalsetOpt = Annotated[str, typer.Option(help="Eval set name or path.")]
ResumeLevelsOpt = Annotated[bool, typer.Option(
    "--resume", help="Keep the levels a run with the same settings in --out finished (each has its "
    "level.json); run the others again from their start.", rich_help_panel=OUTPUT_PANEL)]
PromptOpt = Annotated[str, typer.Option(help="Prompt name (baseline, contrastive) or file.")]
GuardrailsOpt = Annotated[list[str] | None, typer.Option(
    help="Rule set names (guardrails/NAME.toml, or learned:NAME: a trained classifier), or 'none'.")]
EndpointOpt = Annotated[str | None, typer.Option("--endpoint", "--base-url", help="OpenAI-compatible base URL; "
                                                 "default: a local vLLM.", rich_help_panel=ENDPOINT_PANEL)]
ModelOpt = Annotated[str, typer.Option(help="Served model name (or local model alias).")]
KeyOpt = Annotated[str | None, typer.Option(help="Environment variable holding the API key.",
                                            rich_help_panel=ENDPOINT_PANEL)]
LimitOpt = Annotated[int | None, typer.Option(help="Only the first K items.", rich_help_panel=LOAD_PANEL)]
MaxTokOpt = Annotated[int, typer.Option(help="max_tokens per request.")]
