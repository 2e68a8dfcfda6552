"""`rag eval`: index the docs if needed, run every case, print a table, write report + chart."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag.core.config import Settings
from rag.core.errors import ConfigError
from rag.core.terminal import one_line
from rag.eval.evaluation import (
    GATED,
    LONG_ANSWER_WORDS,
    CaseResult,
    compare,
    default_index_for,
    load_cases,
    run_eval,
)

if TYPE_CHECKING:
    from rich.console import Console

TABLE_METRICS = ("hit@1", "hit@3", "hit@5", "mrr", "section_hit@1", "section_hit@3",
                 "section_hit@5", "section_mrr", "evidence_hit", "citation_validity",
                 "citation_precision", "citation_recall", "must_include", "reader_ceiling",
                 "abstention",
                 "false_abstention", "injection_repeated")
EXIT_REGRESSION = 10
EXIT_CASE_ERRORS = 3  # a case raised (a model server gone, a timeout): the figures are not valid


def run_eval_command(
    eval_file: Path, *, docs: Path | None, index: Path | None, settings: Settings,
    generator: str | None, out: Path | None, limit: int | None, baseline: Path | None,
    tolerance: float,
) -> int:
    from rich.console import Console

    from rag.indexer.embedding import make_embedder
    from rag.indexer.indexing import run_index
    from rag.pipeline import Pipeline, open_retriever

    console = Console(stderr=True)
    cases = load_cases(eval_file)[:limit] if limit else load_cases(eval_file)
    docs = docs or Path(settings.docs.root)
    if not docs.is_dir():
        raise ConfigError(f"docs folder {docs} does not exist")
    before = _read_report(baseline) if baseline else None
    index = index or default_index_for(docs)
    embedder = make_embedder(settings.embedding)  # loaded once, for indexing and questions
    report = run_index(docs, index, settings, show_progress=True, embedder=embedder)
    for warning in report.warnings:
        console.print(f"warning: {one_line(warning)}", markup=False, emoji=False)
    name = generator or settings.generation.generator
    started = time.perf_counter()
    retriever = open_retriever(index, settings, embedder)
    with Pipeline(index, settings, generator=name, retriever=retriever) as pipeline, \
            _case_progress(console, len(cases)) as done:
        result = run_eval(cases, docs,
                          lambda c: pipeline.ask(c.question, groups=c.groups), on_case=done)
    result.update(generator=name, eval_file=str(eval_file), docs=str(docs),
                  seconds=round(time.perf_counter() - started, 2))
    out = out or Path("reports") / f"eval-{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1), encoding="utf-8")
    chart = write_chart(out.parent, str(eval_file))
    _print_table(result, out, chart)
    for path in result["missing_sources"]:
        console.print(f"warning: expected source {one_line(path)} is not in {one_line(docs)}",
                      markup=False, emoji=False)
    errors = [c for c in result["cases"] if c["error"]]
    for case in errors[:5]:
        console.print(f"warning: case {one_line(case['id'])}: {one_line(case['error'])}",
                      markup=False, emoji=False)
    if errors:
        console.print(f"error: {len(errors)} of {len(result['cases'])} cases failed "
                      "(see the warnings above and the report)", markup=False, emoji=False)
    if before is not None:
        regressions = compare(result, before, tolerance)
        for line in regressions:
            console.print(f"regression: {line}", markup=False, emoji=False)
        if regressions and not errors:
            return EXIT_REGRESSION
    return EXIT_CASE_ERRORS if errors else 0


@contextmanager
def _case_progress(console: Console, total: int) -> Iterator[Callable[[CaseResult], None]]:
    """A bar on a terminal; otherwise `eval: 10/85 cases, 34 s` every 10 s or tenth."""
    if not console.is_terminal:
        from rag.core.progress import PlainProgress

        lines, count = PlainProgress(what="eval", unit="cases"), [0]
        lines(0, total)

        def step(_: CaseResult) -> None:
            count[0] += 1
            lines(count[0], total)

        yield step
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    with Progress("eval", BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task("cases", total=total)
        yield lambda _: bar.advance(task)


def _read_report(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"baseline {path}: cannot read a report ({exc})") from None
    if not isinstance(data, dict) or "overall" not in data:
        raise ConfigError(f"baseline {path}: not an eval report")
    return data


def _print_table(result: dict[str, Any], out: Path, chart: Path | None) -> None:
    from rich.console import Console
    from rich.table import Table

    overall = result["overall"]
    table = Table(title=f"eval: {overall['cases']} cases, generator {result['generator']}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name in TABLE_METRICS:
        value = overall.get(name)
        if value is not None:
            arrow = "" if name not in GATED else (" (higher is better)" if GATED[name]
                                                  else " (lower is better)")
            table.add_row(name + arrow, f"{value:.3f}")
    for stage, lat in overall["latency_ms"].items():
        table.add_row(f"latency {stage} p50 / p95 (ms)", f"{lat['p50']:.1f} / {lat['p95']:.1f}")
    words = overall.get("answer_words") or {}
    if words.get("answers"):
        table.add_row(f"answer words median / max / over {LONG_ANSWER_WORDS}",
                      f"{words['median']:g} / {words['max']} / "
                      f"{words[f'over_{LONG_ANSWER_WORDS}']}")
    table.add_row("prompt / completion tokens",
                  f"{overall['tokens']['prompt']} / {overall['tokens']['completion']}")
    table.add_row("case errors", str(overall["errors"]))
    console = Console()
    console.print(table)
    console.print(f"report: {out}" + (f"\nchart: {chart}" if chart else ""), markup=False)


def chart_reports(folder: Path, eval_file: str) -> dict[str, dict[str, Any]]:
    """Per generator, the overall figures of its newest report in the folder on the same
    eval file: a report of another eval set, or an older run, never stands in for it."""
    reports: dict[str, dict[str, Any]] = {}
    for _, path in sorted((p.stat().st_mtime_ns, p) for p in folder.glob("eval-*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("eval_file") == eval_file:
                reports[data["generator"]] = data["overall"]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return reports


def write_chart(folder: Path, eval_file: str) -> Path | None:
    """A bar chart of the main metrics, one bar group per generator (chart_reports)."""
    reports = chart_reports(folder, eval_file)
    if not reports:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [m for m in TABLE_METRICS if any(r.get(m) is not None for r in reports.values())]
    fig, ax = plt.subplots(figsize=(max(8, len(metrics) * 0.9), 4.5))
    width = 0.8 / len(reports)
    for i, (name, overall) in enumerate(reports.items()):
        xs = [j + i * width for j in range(len(metrics))]
        ax.bar(xs, [overall.get(m) or 0 for m in metrics], width, label=name)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(metrics))])
    ax.set_xticklabels(metrics, rotation=35, ha="right")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("share of cases")
    ax.set_title("Answer eval by generator")
    ax.legend()
    fig.tight_layout()
    path = folder / "eval.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
