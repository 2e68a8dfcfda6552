"""Command line: thin wrappers over the pipeline. Heavy imports live inside the commands."""

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

from rag.errors import EXIT_INTERRUPTED, RagError
from rag.terminal import block, json_line, one_line

EXIT_USAGE = 2
EXIT_OTHER = 3


class OneLineErrors(TyperGroup):
    """Usage errors and unexpected failures as one line on stderr, never a panel or traceback.

    Runs every command non-standalone, so click's exceptions reach this method: a usage
    error exits 2, any exception no command turned into a RagError exits 3 (RAG_DEBUG=1
    re-raises it for a traceback).
    """

    def main(self, args: Any = None, prog_name: str | None = None,
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


app = typer.Typer(
    cls=OneLineErrors,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Ask questions about a folder of Markdown docs; every citation is verified.",
)

IndexOpt = Annotated[Path, typer.Option("--index", help="Index folder.")]
ConfigOpt = Annotated[
    Path | None, typer.Option("--config", help="TOML config [default: configs/default.toml].")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
GeneratorOpt = Annotated[str | None, typer.Option(
    "--generator", help="extractive (default), local or openai.")]
GroupsOpt = Annotated[
    str, typer.Option("--groups", help="Comma-separated groups of the asking user.")
]
DocsOpt = Annotated[Path | None, typer.Option(
    "--docs", help="Docs folder; indexed first (without --index: into a cache per folder).")]
MaybeIndexOpt = Annotated[Path | None, typer.Option(
    "--index", help="Index folder (default: indexes/default, or the --docs folder's cache).")]
F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_INDEX = Path("indexes/default")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"rag {version('rag')}")
        except PackageNotFoundError:
            typer.echo("rag (not installed)")
        raise typer.Exit(0)


@app.callback()
def _main(version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="Print the version and exit.")]
        = False) -> None:
    """Ask questions about a folder of Markdown docs; every citation is verified."""


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


def _positive(value: int | None) -> int | None:
    if value is not None and value < 1:
        raise typer.BadParameter(f"must be at least 1, not {value}")
    return value


def _not_blank(value: str) -> str:
    if not value.strip():
        raise typer.BadParameter("must not be empty")
    return value


def _groups(value: str) -> frozenset[str]:
    return frozenset(g.strip() for g in value.split(",") if g.strip())


def _index_path(index: Path) -> Path:
    from rag.paths import check_index_path

    return check_index_path(index)


def _settings(config: Path | None) -> Any:
    from rag.config import env_warnings, load_settings

    settings = load_settings(config)
    for warning in env_warnings(os.environ, settings):
        typer.echo(f"warning: {one_line(warning)}", err=True)
    return settings


def _target(index: Path | None, docs: Path | None, settings: Any, quiet: bool = False) -> Any:
    """--index / --docs -> the index (brought up to date when --docs is given) and docs folder."""
    from rag.folders import resolve

    return resolve(index, docs, settings, show_progress=not quiet and sys.stdout.isatty(),
                   warn=lambda line: typer.echo(one_line(line), err=True))


@app.command()
@clean_errors
def index(
    docs_dir: Annotated[Path | None, typer.Argument(help="Docs folder [default: docs.root].")] = None,
    index: IndexOpt = DEFAULT_INDEX,
    config: ConfigOpt = None,
    rebuild: Annotated[bool, typer.Option("--rebuild", help="Re-embed everything.")] = False,
    watch: Annotated[bool, typer.Option(
        "--watch", help="Then re-index on every change until Ctrl-C (exit 0).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Build the index, or bring it up to date with the docs folder."""
    from rag.folders import mark_fresh
    from rag.pipeline import run_index

    settings = _settings(config)
    docs, index = Path(docs_dir or settings.docs.root), _index_path(index)
    report = run_index(docs, index, settings, rebuild=rebuild, show_progress=not json_out)
    mark_fresh(index, settings, report.version)
    _print_report(report, json_out)
    if watch:
        from rag.watch import watch_index

        watch_index(docs, index, settings, lambda r: _print_report(r, json_out),
                    lambda line: typer.echo(one_line(line), err=True))


def _print_report(report: Any, json_out: bool) -> None:
    for warning in report.warnings:
        typer.echo(f"warning: {one_line(warning)}", err=True)
    typer.echo(json_line(report.to_dict()) if json_out else report.summary())


@app.command()
@clean_errors
def search(
    query: Annotated[str, typer.Argument(help="What to look for.", callback=_not_blank)],
    index: MaybeIndexOpt = None,
    docs: DocsOpt = None,
    config: ConfigOpt = None,
    mode: Annotated[str | None, typer.Option("--mode", help="dense, lexical or hybrid.")] = None,
    k: Annotated[int | None, typer.Option("--k", "-k", help="Hits to return.",
                                          callback=_positive)] = None,
    groups: GroupsOpt = "",
    json_out: JsonOpt = False,
) -> None:
    """Search Hits only, no model."""
    from rag.pipeline import open_retriever

    settings = _settings(config)
    target = _target(index, docs, settings, json_out)
    retriever = open_retriever(target.index, settings, target.embedder)
    hits = retriever.search(query, k=k, mode=mode, groups=_groups(groups))
    for hit in hits:
        if json_out:
            typer.echo(json_line(hit.to_dict()))
            continue
        c = hit.chunk
        snippet = one_line(" ".join(c.text.split())[:160])
        typer.echo(f"{one_line(c.source_path)}:{c.start_line}-{c.end_line}  "
                   f"{one_line(c.heading or '-')}  {hit.score:.4f}\n    {snippet}")
    if not hits and not json_out:
        typer.echo("no hits", err=True)


@app.command()
@clean_errors
def ask(
    question: Annotated[str, typer.Argument(help="Your question.", callback=_not_blank)],
    index: MaybeIndexOpt = None,
    docs: DocsOpt = None,
    config: ConfigOpt = None,
    generator: GeneratorOpt = None,
    mode: Annotated[str | None, typer.Option("--mode", help="dense, lexical or hybrid.")] = None,
    k: Annotated[int | None, typer.Option(
        "--k", "-k", min=1, max=1000,
        help="Hits retrieved before evidence selection (default: retrieval.k).")] = None,
    groups: GroupsOpt = "",
    json_out: JsonOpt = False,
) -> None:
    """Answer from the docs, with verified `path:start-end` citations."""
    from rag.errors import EXIT_ANSWERED, EXIT_INSUFFICIENT
    from rag.pipeline import Pipeline, open_retriever, render_answer
    from rag.reverify import answer_json

    settings = _settings(config)
    if k is not None:
        settings = settings.model_copy(
            update={"retrieval": settings.retrieval.model_copy(update={"k": k})})
    target = _target(index, docs, settings, json_out)
    retriever = open_retriever(target.index, settings, target.embedder)
    with Pipeline(target.index, settings, generator=generator, retriever=retriever) as pipeline:
        result = pipeline.ask(question, mode=mode, groups=_groups(groups))
    if json_out:
        typer.echo(json_line(answer_json(result, target.docs)))
    else:
        typer.echo(block(render_answer(result, target.docs)))
    raise typer.Exit(EXIT_INSUFFICIENT if result.insufficient_evidence else EXIT_ANSWERED)


@app.command("eval")
@clean_errors
def eval_cmd(
    eval_file: Annotated[Path, typer.Argument(help="Eval cases, JSON Lines.")],
    docs: Annotated[Path | None, typer.Option("--docs", help="Docs root [default: docs.root].")]
    = None,
    index: Annotated[Path | None, typer.Option(
        "--index", help="Index folder [default: indexes/eval-<docs>-<hash>].")] = None,
    config: ConfigOpt = None,
    generator: GeneratorOpt = None,
    out: Annotated[Path | None, typer.Option(
        "--out", help="Report path [default: reports/eval-<generator>.json].")] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="Only the first N cases.",
                                              callback=_positive)] = None,
    baseline: Annotated[Path | None, typer.Option(
        "--baseline", help="Fail when a metric falls below this report's.")] = None,
    tolerance: Annotated[float, typer.Option("--tolerance", help="Allowed drop (0 to 1).",
                                             min=0.0, max=1.0)] = 0.02,
) -> None:
    """Run the answer evaluation; write a JSON report and a chart, print a summary."""
    from rag.eval_run import run_eval_command
    from rag.folders import docs_of_index

    if docs is None and index is not None:
        docs = docs_of_index(_index_path(index))  # the folder that index was built from
    code = run_eval_command(eval_file, docs=docs, index=index and _index_path(index),
                            settings=_settings(config),
                            generator=generator, out=out, limit=limit, baseline=baseline,
                            tolerance=tolerance)
    raise typer.Exit(code)


@app.command("serve-model")
@clean_errors
def serve_model(
    config: ConfigOpt = None,
    port: Annotated[int | None, typer.Option("--port", help="Loopback port.")] = None,
) -> None:
    """Keep the embedded local model running so repeated `rag ask` calls reuse it."""
    from rag.local_model import default_gguf_path, serve_forever

    gen = _settings(config).generation
    model = gen.local_model_path or default_gguf_path()
    typer.echo(f"serving {one_line(Path(model).name)} on 127.0.0.1:{port or gen.local_port} (Ctrl-C stops)",
               err=True)
    serve_forever(model, port or gen.local_port, gen.local_context_tokens, gen.local_threads)


@app.command()
@clean_errors
def serve(
    index: MaybeIndexOpt = None,
    config: ConfigOpt = None,
    docs: DocsOpt = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8000,
    generator: GeneratorOpt = None,
    watch: Annotated[bool, typer.Option(
        "--watch", help="Re-index when the docs change; requests see old or new, never a mix.")]
    = False,
    dev_trust_claimed_groups: Annotated[bool, typer.Option(
        "--dev-trust-claimed-groups",
        help="Believe the groups a request names (development only: anyone reads anything).",
    )] = False,
) -> None:
    """HTTP API and web page: ask from a browser, click a citation, see the cited lines."""
    from rag.server import serve as run_server

    settings = _settings(config)
    target = _target(index, docs, settings)
    run_server(index=target.index, settings=settings, docs=target.docs, host=host, port=port,
               generator=generator, watch=watch,
               trust_claimed_groups=dev_trust_claimed_groups)


@app.command()
@clean_errors
def mcp(
    index: MaybeIndexOpt = None,
    docs: DocsOpt = None,
    config: ConfigOpt = None,
    generator: GeneratorOpt = None,
    groups: Annotated[str, typer.Option(
        "--groups", help="Comma-separated groups the server acts for (never from a tool call).")]
    = "",
) -> None:
    """MCP server over stdio: search_docs, ask_docs, read_lines, list_sources."""
    from rag.mcp_server import run_mcp

    settings = _settings(config)
    target = _target(index, docs, settings, quiet=True)  # stdout carries the protocol
    run_mcp(target.index, target.docs, settings, generator=generator, groups=_groups(groups))


@app.command()
@clean_errors
def verify(
    answer_file: Annotated[Path, typer.Argument(help="A saved `rag ask --json` answer.")],
    docs: Annotated[Path | None, typer.Option(
        "--docs", help="Docs folder (default: the one the answer was made from).")] = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Re-check a saved answer's citations against the docs now (exit 8 unless all exact).

    Each citation is exact, moved (same lines at another range), changed, or gone.
    """
    from rag.reverify import verify_file

    code = verify_file(answer_file, docs, _settings(config), json_out=json_out,
                       echo=typer.echo)
    raise typer.Exit(code)


token_app = typer.Typer(no_args_is_help=True,
                        help="API tokens for `rag serve` (stored hashed in [server] tokens_file).")
app.add_typer(token_app, name="token")


@token_app.command("add")
@clean_errors
def token_add(
    name: Annotated[str, typer.Argument(help="User name the token stands for.")],
    groups: GroupsOpt = "",
    config: ConfigOpt = None,
) -> None:
    """Create a token for NAME and print it once; only its hash is kept."""
    from rag.auth import add_token, parse_groups, tokens_path

    path = tokens_path(_settings(config).server)
    token = add_token(path, name, parse_groups(groups))
    typer.echo(f"token for {name} (shown once; store it now):", err=True)
    typer.echo(token)


@token_app.command("list")
@clean_errors
def token_list(config: ConfigOpt = None, json_out: JsonOpt = False) -> None:
    """Users with a token and their groups (tokens themselves are never stored)."""
    from rag.auth import read_tokens, tokens_path

    entries = read_tokens(tokens_path(_settings(config).server))
    for e in entries:
        if json_out:
            typer.echo(json_line({"name": e.name, "groups": list(e.groups),
                                   "created": e.created}))
        else:
            typer.echo(one_line(f"{e.name}  groups: {','.join(e.groups) or '-'}  created {e.created}"))
    if not entries and not json_out:
        typer.echo("no tokens", err=True)


@token_app.command("remove")
@clean_errors
def token_remove(
    name: Annotated[str, typer.Argument(help="User whose token stops working.")],
    config: ConfigOpt = None,
) -> None:
    """Revoke NAME's token; a running server refuses it from the next request."""
    from rag.auth import remove_token, tokens_path

    remove_token(tokens_path(_settings(config).server), name)
    typer.echo(f"removed the token of {name}", err=True)


def main() -> None:
    """Entry point that also turns a failed import (broken install) into one line."""
    try:
        app()
    except ImportError as exc:  # pragma: no cover - depends on the install
        typer.echo(f"error: missing dependency ({exc}); run scripts/setup.sh", err=True)
        sys.exit(3)


if __name__ == "__main__":
    main()
