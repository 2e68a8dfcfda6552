"""Command line: thin wrappers over the pipeline. Heavy imports live inside the commands."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from rag.errors import EXIT_INTERRUPTED, RagError

app = typer.Typer(
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
GroupsOpt = Annotated[
    str, typer.Option("--groups", help="Comma-separated groups of the asking user.")
]
F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_INDEX = Path("indexes/default")


def fail(message: str, code: int) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
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


def _groups(value: str) -> frozenset[str]:
    return frozenset(g.strip() for g in value.split(",") if g.strip())


def _index_path(index: Path) -> Path:
    from rag.paths import check_index_path

    return check_index_path(index)


def _settings(config: Path | None) -> Any:
    from rag.config import load_settings

    return load_settings(config)


@app.command()
@clean_errors
def index(
    docs_dir: Annotated[Path | None, typer.Argument(help="Docs folder [default: docs.root].")] = None,
    index: IndexOpt = DEFAULT_INDEX,
    config: ConfigOpt = None,
    rebuild: Annotated[bool, typer.Option("--rebuild", help="Re-embed everything.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Build the index, or bring it up to date with the docs folder."""
    from rag.pipeline import run_index

    settings = _settings(config)
    report = run_index(Path(docs_dir or settings.docs.root), _index_path(index), settings,
                       rebuild=rebuild, show_progress=not json_out)
    for warning in report.warnings:
        typer.echo(f"warning: {warning}", err=True)
    if json_out:
        typer.echo(json.dumps(report.to_dict()))
    else:
        typer.echo(report.summary())


@app.command()
@clean_errors
def search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    index: IndexOpt = DEFAULT_INDEX,
    config: ConfigOpt = None,
    mode: Annotated[str | None, typer.Option("--mode", help="dense, lexical or hybrid.")] = None,
    k: Annotated[int | None, typer.Option("--k", "-k", help="Hits to return.")] = None,
    groups: GroupsOpt = "",
    json_out: JsonOpt = False,
) -> None:
    """Search Hits only, no model."""
    from rag.pipeline import open_retriever

    retriever = open_retriever(_index_path(index), _settings(config))
    hits = retriever.search(query, k=k, mode=mode, groups=_groups(groups))
    for hit in hits:
        if json_out:
            typer.echo(json.dumps(hit.to_dict(), ensure_ascii=False))
            continue
        c = hit.chunk
        snippet = " ".join(c.text.split())[:160]
        typer.echo(f"{c.source_path}:{c.start_line}-{c.end_line}  {c.heading or '-'}  "
                   f"{hit.score:.4f}\n    {snippet}")
    if not hits and not json_out:
        typer.echo("no hits", err=True)


@app.command()
@clean_errors
def ask(
    question: Annotated[str, typer.Argument(help="Your question.")],
    index: IndexOpt = DEFAULT_INDEX,
    config: ConfigOpt = None,
    generator: Annotated[
        str | None, typer.Option("--generator", help="local, openai or extractive.")
    ] = None,
    mode: Annotated[str | None, typer.Option("--mode", help="dense, lexical or hybrid.")] = None,
    groups: GroupsOpt = "",
    json_out: JsonOpt = False,
) -> None:
    """Answer from the docs, with verified `path:start-end` citations."""
    from rag.errors import EXIT_ANSWERED, EXIT_INSUFFICIENT
    from rag.pipeline import Pipeline, render_answer

    settings = _settings(config)
    with Pipeline(_index_path(index), settings, generator=generator) as pipeline:
        result = pipeline.ask(question, mode=mode, groups=_groups(groups))
        docs_root = Path(pipeline.retriever.index.manifest.docs_root)
    if json_out:
        typer.echo(json.dumps(result.to_dict(), ensure_ascii=False))
    else:
        typer.echo(render_answer(result, docs_root))
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
    generator: Annotated[
        str | None, typer.Option("--generator", help="local, openai or extractive.")
    ] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", help="Report path [default: reports/eval-<generator>.json].")] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="Only the first N cases.")] = None,
    baseline: Annotated[Path | None, typer.Option(
        "--baseline", help="Fail when a metric falls below this report's.")] = None,
    tolerance: Annotated[float, typer.Option("--tolerance", help="Allowed drop.")] = 0.02,
) -> None:
    """Run the answer evaluation; write a JSON report and a chart, print a summary."""
    from rag.eval_run import run_eval_command

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
    typer.echo(f"serving {Path(model).name} on 127.0.0.1:{port or gen.local_port} (Ctrl-C stops)",
               err=True)
    serve_forever(model, port or gen.local_port, gen.local_context_tokens, gen.local_threads)


@app.command()
@clean_errors
def serve(
    index: IndexOpt = DEFAULT_INDEX,
    config: ConfigOpt = None,
    docs: Annotated[Path | None, typer.Option("--docs", help="Docs root [default: docs.root].")]
    = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8000,
    generator: Annotated[
        str | None, typer.Option("--generator", help="local, openai or extractive.")
    ] = None,
) -> None:
    """HTTP API and web page: ask from a browser, click a citation, see the cited lines."""
    from rag.server import serve as run_server

    settings = _settings(config)
    run_server(index=_index_path(index), settings=settings, docs=Path(docs or settings.docs.root),
               host=host, port=port, generator=generator)


def main() -> None:
    """Entry point that also turns a failed import (broken install) into one line."""
    try:
        app()
    except ImportError as exc:  # pragma: no cover - depends on the install
        typer.echo(f"error: missing dependency ({exc}); run scripts/setup.sh", err=True)
        sys.exit(3)


if __name__ == "__main__":
    main()
