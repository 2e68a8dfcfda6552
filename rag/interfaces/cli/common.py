"""What every `rag` command shares: one-line errors, option types, settings and targets."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
from typer.core import TyperGroup

from rag.core.errors import EXIT_INTERRUPTED, RagError
from rag.core.terminal import one_line

EXIT_USAGE = 2
EXIT_OTHER = 3


class OneLineErrors(TyperGroup):
    """Usage errors and unexpected failures as one line on stderr, never a panel or traceback.

    Runs every command non-standalone, so click's exceptions reach this method: a usage
    error exits 2, any exception no command turned into a RagError exits 3 (RAG_DEBUG=1
    re-raises it for a traceback).
    """

    # click declares main() with overloads on standalone_mode; this one takes the same
    # arguments and returns what the command returns, which mypy cannot match to them.
    def main(self, args: Any = None, prog_name: str | None = None,  # type: ignore[override]
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except NoArgsIsHelpError as exc:
            if exc.ctx is not None:
                exc.ctx.get_help()  # typer prints its help panel itself
            code = EXIT_USAGE
        except UsageError as exc:
            hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx else ""
            typer.echo(f"error: {one_line(exc.format_message())}{hint}", err=True)
            code = EXIT_USAGE
        except ClickException as exc:
            typer.echo(f"error: {one_line(exc.format_message())}", err=True)
            code = exc.exit_code
        except (typer.Abort, KeyboardInterrupt):
            typer.echo("error: interrupted", err=True)
            code = EXIT_INTERRUPTED
        except ImportError as exc:  # a broken install, met inside a command
            typer.echo(f"error: missing dependency ({one_line(exc)}); run scripts/setup.sh",
                       err=True)
            code = EXIT_OTHER
        except Exception as exc:  # the last line of defence
            if os.environ.get("RAG_DEBUG"):
                raise
            detail = one_line(str(exc).splitlines()[0][:200] if str(exc) else "")
            typer.echo(f"error: unexpected {type(exc).__name__}"
                       f"{': ' + detail if detail else ''} (RAG_DEBUG=1 shows a traceback)",
                       err=True)
            code = EXIT_OTHER
        sys.exit(code if isinstance(code, int) else 0)


IndexOpt = Annotated[Path, typer.Option("--index", help="Index folder.")]
ConfigOpt = Annotated[
    Path | None, typer.Option("--config", help="TOML config [default: configs/default.toml].")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


def generator_names() -> list[str]:
    """The names `generation.generator` accepts, from the config itself (not a copy; the
    registry in rag.generator.backends is tested to hold the same names)."""
    from typing import get_args

    from rag.core.config import GenerationSettings

    return sorted(get_args(GenerationSettings.model_fields["generator"].annotation))


def check_generator(value: str | None) -> str | None:
    """Checked before anything runs, so a typo fails even when the answer would abstain."""
    if value is not None and value not in (names := generator_names()):
        raise typer.BadParameter(f"unknown generator {value!r} (choose {', '.join(names)})")
    return value


def check_mode(value: str | None) -> str | None:
    """Checked before anything runs: a typo is a usage error, not a failed search (exit 6)."""
    from rag.retriever.retrieval import MODES

    if value is not None and value not in MODES:
        raise typer.BadParameter(f"unknown search mode {value!r} (choose {', '.join(MODES)})")
    return value


def check_port(value: int | None) -> int | None:
    """Checked before anything starts: out of range, uvicorn fails with a traceback, and a
    negative port reached the host check as a misleading config error."""
    if value is not None and not 1 <= value <= 65535:
        raise typer.BadParameter(f"must be a port from 1 to 65535, not {value}")
    return value


def utf8_folder(value: Path | None) -> Path | None:
    """A docs folder's path goes into the index, eval reports and JSON answers, all UTF-8;
    a name with a byte that is not UTF-8 fails here as one line, not deep in a writer."""
    try:
        str(value or "").encode("utf-8")
    except UnicodeEncodeError:
        raise typer.BadParameter(
            f"folder path {value} is not valid UTF-8; rename the folder") from None
    return value


GeneratorOpt = Annotated[str | None, typer.Option(
    "--generator", help="extractive (default), local, openai, or passage (the top passage "
    "whole).", callback=check_generator)]
GroupsOpt = Annotated[
    str, typer.Option("--groups", help="Comma-separated groups of the asking user.")
]
DocsOpt = Annotated[Path | None, typer.Option(
    "--docs", help="Docs folder; indexed first (without --index: into a cache per folder).",
    callback=utf8_folder)]
ModeOpt = Annotated[str | None, typer.Option(
    "--mode", help="dense, lexical or hybrid.", callback=check_mode)]
MaybeIndexOpt = Annotated[Path | None, typer.Option(
    "--index", help="Index folder (default: indexes/default, or the --docs folder's cache).")]
F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_INDEX = Path("indexes/default")


def fail(message: str, code: int) -> typer.Exit:
    typer.echo(f"error: {one_line(message)}", err=True)
    return typer.Exit(code)


def clean_errors(func: F) -> F:
    """Turn domain errors into one line on stderr and a distinct exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except RagError as exc:
            raise fail(str(exc), exc.exit_code) from None
        except KeyboardInterrupt:
            raise fail("interrupted", EXIT_INTERRUPTED) from None
        except OSError as exc:
            if os.environ.get("RAG_DEBUG"):
                raise
            where = f" ({exc.filename})" if exc.filename else ""
            raise fail(f"{exc.strerror or exc}{where}", 3) from None

    return wrapper  # type: ignore[return-value]


def positive(value: int | None) -> int | None:
    if value is not None and value < 1:
        raise typer.BadParameter(f"must be at least 1, not {value}")
    return value


def not_blank(value: str) -> str:
    if not value.strip():
        raise typer.BadParameter("must not be empty")
    return value


def group_set(value: str) -> frozenset[str]:
    return frozenset(g.strip() for g in value.split(",") if g.strip())


def index_path(index: Path) -> Path:
    from rag.core.paths import check_index_path

    return check_index_path(index)


def cli_settings(config: Path | None) -> Any:
    from rag.core.config import env_warnings, load_settings

    settings = load_settings(config)
    for warning in env_warnings(os.environ, settings):
        typer.echo(f"warning: {one_line(warning)}", err=True)
    return settings


def target_of(index: Path | None, docs: Path | None, settings: Any, quiet: bool = False) -> Any:
    """--index / --docs -> the index (brought up to date when --docs is given) and docs folder."""
    from rag.indexer.folders import resolve

    return resolve(index, docs, settings, show_progress=not quiet and sys.stdout.isatty(),
                   warn=lambda line: typer.echo(one_line(line), err=True))


