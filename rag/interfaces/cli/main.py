"""Command line: thin wrappers over the pipeline. Heavy imports live inside the commands."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from rag.core.terminal import json_line, one_line
from rag.interfaces.cli.common import (
    DEFAULT_INDEX,
    ConfigOpt,
    DocsOpt,
    GeneratorOpt,
    GroupsOpt,
    IndexOpt,
    JsonOpt,
    MaybeIndexOpt,
    ModeOpt,
    OneLineErrors,
    check_port,
    clean_errors,
    cli_settings,
    group_set,
    index_path,
    not_blank,
    positive,
    target_of,
    utf8_folder,
)
from rag.interfaces.cli.token import token_app

app = typer.Typer(
    cls=OneLineErrors,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Ask questions about a docs folder (Markdown, reStructuredText, notebooks, HTML, "
    "text); every citation is verified.",
)

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
    """Ask questions about a docs folder (Markdown, reStructuredText, notebooks, HTML,
    text); every citation is verified."""


@app.command()
@clean_errors
def index(
    docs_dir: Annotated[Path | None, typer.Argument(
        help="Docs folder [default: docs.root].", callback=utf8_folder)] = None,
    index: IndexOpt = DEFAULT_INDEX,
    config: ConfigOpt = None,
    rebuild: Annotated[bool, typer.Option("--rebuild", help="Re-embed everything.")] = False,
    watch: Annotated[bool, typer.Option(
        "--watch", help="Then re-index on every change until Ctrl-C (exit 0).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Build the index, or bring it up to date with the docs folder."""
    import rag

    settings = cli_settings(config)
    docs, index = Path(docs_dir or settings.docs.root), index_path(index)
    report = rag.index(docs, index, settings=settings, rebuild=rebuild, progress=not json_out)
    _print_report(report, json_out)
    if watch:
        from rag.interfaces.watch import watch_index

        watch_index(docs, index, settings, lambda r: _print_report(r, json_out),
                    lambda line: typer.echo(one_line(line), err=True))


def _print_report(report: Any, json_out: bool) -> None:
    for warning in report.warnings:
        typer.echo(f"warning: {one_line(warning)}", err=True)
    typer.echo(json_line(report.to_dict()) if json_out else report.summary())


@app.command()
@clean_errors
def search(
    query: Annotated[str, typer.Argument(help="What to look for.", callback=not_blank)],
    index: MaybeIndexOpt = None,
    docs: DocsOpt = None,
    config: ConfigOpt = None,
    mode: ModeOpt = None,
    k: Annotated[int | None, typer.Option("--k", "-k", help="Hits to return.",
                                          callback=positive)] = None,
    groups: GroupsOpt = "",
    json_out: JsonOpt = False,
) -> None:
    """Search Hits only, no model."""
    import rag

    hits = rag.search(query, index=index, docs=docs, settings=cli_settings(config), mode=mode,
                      k=k, groups=group_set(groups), **_indexing_shown(json_out))
    if json_out:
        for hit in hits:
            typer.echo(json_line(hit.to_dict()))
    elif hits:
        from rag.interfaces.render import hit_lines

        _print_lines(hit_lines(hits))
    else:
        typer.echo("no hits", err=True)


def _print_lines(lines: Any) -> None:
    """Wrapped and coloured on a terminal, plain (rag.interfaces.render.plain) when piped."""
    from rag.interfaces.render import plain, show

    if sys.stdout.isatty():
        from rich.console import Console

        show(lines, Console())
    else:
        typer.echo(plain(lines))


@app.command()
@clean_errors
def ask(
    question: Annotated[str, typer.Argument(help="Your question.", callback=not_blank)],
    index: MaybeIndexOpt = None,
    docs: DocsOpt = None,
    config: ConfigOpt = None,
    generator: GeneratorOpt = None,
    mode: ModeOpt = None,
    k: Annotated[int | None, typer.Option(
        "--k", "-k", min=1, max=1000,
        help="Hits retrieved before evidence selection (default: retrieval.k).")] = None,
    groups: GroupsOpt = "",
    json_out: JsonOpt = False,
) -> None:
    """Answer from the docs, with verified `path:start-end` citations."""
    import rag
    from rag.core.errors import EXIT_ANSWERED, EXIT_INSUFFICIENT
    from rag.indexer.folders import resolve_docs
    from rag.interfaces.render import answer_lines
    from rag.verifier.reverify import answer_json

    settings = cli_settings(config)
    if k is not None:
        settings = settings.model_copy(
            update={"retrieval": settings.retrieval.model_copy(update={"k": k})})
    # The spinner only where no indexing (with its own progress bar) can come first.
    with _spinner("answering") if docs is None else contextlib.nullcontext():
        result = rag.ask(question, index=index, docs=docs, settings=settings,
                         generator=generator, mode=mode, groups=group_set(groups),
                         **_indexing_shown(json_out))
    shown_docs = resolve_docs(index, docs, settings)
    if json_out:
        typer.echo(json_line(answer_json(result, shown_docs)))
    else:
        _print_lines(answer_lines(result, shown_docs))
    raise typer.Exit(EXIT_INSUFFICIENT if result.insufficient_evidence else EXIT_ANSWERED)


def _indexing_shown(quiet: bool) -> dict[str, Any]:
    """How `--docs` indexing shows itself: a bar on a terminal, warnings as one line each."""
    return {"progress": not quiet and sys.stdout.isatty(),
            "on_warning": lambda line: typer.echo(one_line(line), err=True)}


def _spinner(what: str) -> Any:
    """A spinner on stderr while waiting, on a terminal only."""
    if not sys.stderr.isatty():
        return contextlib.nullcontext()
    from rich.console import Console

    return Console(stderr=True).status(f"{what}...")


@app.command("eval")
@clean_errors
def eval_cmd(
    eval_file: Annotated[Path, typer.Argument(help="Eval cases, JSON Lines.")],
    docs: Annotated[Path | None, typer.Option(
        "--docs", help="Docs root [default: docs.root].", callback=utf8_folder)] = None,
    index: Annotated[Path | None, typer.Option(
        "--index", help="Index folder [default: indexes/eval-<docs>-<hash>].")] = None,
    config: ConfigOpt = None,
    generator: GeneratorOpt = None,
    out: Annotated[Path | None, typer.Option(
        "--out", help="Report path [default: reports/eval-<generator>.json].")] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="Only the first N cases.",
                                              callback=positive)] = None,
    baseline: Annotated[Path | None, typer.Option(
        "--baseline", help="Fail when a metric falls below this report's.")] = None,
    tolerance: Annotated[float, typer.Option("--tolerance", help="Allowed drop (0 to 1).",
                                             min=0.0, max=1.0)] = 0.02,
) -> None:
    """Run the answer evaluation; write a JSON report and a chart, print a summary."""
    from rag.eval.eval_run import run_eval_command
    from rag.indexer.folders import docs_of_index

    if docs is None and index is not None:
        docs = docs_of_index(index_path(index))  # the folder that index was built from
    code = run_eval_command(eval_file, docs=docs, index=index and index_path(index),
                            settings=cli_settings(config),
                            generator=generator, out=out, limit=limit, baseline=baseline,
                            tolerance=tolerance)
    raise typer.Exit(code)


@app.command("serve-model")
@clean_errors
def serve_model(
    config: ConfigOpt = None,
    port: Annotated[int | None, typer.Option(
        "--port", help="Loopback port.", callback=check_port)] = None,
) -> None:
    """Keep the embedded local model running so repeated `rag ask` calls reuse it."""
    from rag.generator.local.model import model_to_run
    from rag.generator.local.serve_model import serve_forever

    gen = cli_settings(config).generation
    model = model_to_run(gen)
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
    port: Annotated[int, typer.Option(
        "--port", help="Port to listen on.", callback=check_port)] = 8000,
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
    from rag.interfaces.http.server import serve as run_server

    settings = cli_settings(config)
    target = target_of(index, docs, settings)
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
    """MCP server over stdio: search_docs, ask_docs, check_claims, read_lines, list_sources."""
    from rag.interfaces.mcp_server import run_mcp

    settings = cli_settings(config)
    target = target_of(index, docs, settings, quiet=True)  # stdout carries the protocol
    run_mcp(target.index, target.docs, settings, generator=generator, groups=group_set(groups))


@app.command()
@clean_errors
def verify(
    answer_file: Annotated[Path, typer.Argument(help="A saved `rag ask --json` answer.")],
    docs: Annotated[Path | None, typer.Option(
        "--docs", help="Docs folder (default: the one the index was built from).",
        callback=utf8_folder)] = None,
    index: IndexOpt = DEFAULT_INDEX,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Re-check a saved answer's citations against the docs now (exit 8 unless all exact).

    Each citation is exact, moved (same lines at another range), changed, or gone.
    """
    from rag.verifier.reverify import verify_file

    code = verify_file(answer_file, docs, index, cli_settings(config), json_out=json_out,
                       echo=typer.echo)
    raise typer.Exit(code)


@app.command()
@clean_errors
def check(
    text_file: Annotated[Path, typer.Argument(
        help="The text to check: a draft answer, a README, a reply (Markdown or plain).")],
    index: MaybeIndexOpt = None,
    docs: DocsOpt = None,
    config: ConfigOpt = None,
    mode: ModeOpt = None,
    groups: GroupsOpt = "",
    json_out: JsonOpt = False,
) -> None:
    """Check each sentence of a text against the docs (exit 8 unless all are supported).

    Each sentence is supported (with the lines that back it), conflicting (the closest
    lines state another number, version, identifier or the opposite) or not_found.
    """
    import rag
    from rag.core.errors import EXIT_NOT_VERIFIED
    from rag.verifier.check import load_text

    settings = cli_settings(config)
    text = load_text(text_file, settings.docs.max_file_bytes)
    with _spinner("checking") if docs is None else contextlib.nullcontext():
        checks = rag.check(text, index=index, docs=docs, settings=settings, mode=mode,
                           groups=group_set(groups), **_indexing_shown(json_out))
    if json_out:
        typer.echo(json_line({"sentences": [c.to_dict() for c in checks]}))
    else:
        from rag.interfaces.render import check_lines

        _print_lines(check_lines(checks, str(text_file)))
    raise typer.Exit(0 if all(c.status == "supported" for c in checks) else EXIT_NOT_VERIFIED)


app.add_typer(token_app, name="token")


def main() -> None:
    """Entry point that also turns a failed import (broken install) into one line."""
    try:
        app()
    except ImportError as exc:  # pragma: no cover - depends on the install
        typer.echo(f"error: missing dependency ({exc}); run scripts/setup.sh", err=True)
        sys.exit(3)


if __name__ == "__main__":
    main()
