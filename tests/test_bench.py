"""scripts/bench.py --smoke prints every figure with its target and a verdict (no timing checks)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import REPO, corpus_dir

FIGURES = ["(a) indexing throughput", "(b) re-index after a one-file edit",
           "(c) query p50 at", "(c) recall@10 at", "(d) memory, 1M chunks HNSW",
           "(e) cold start `rag search`", "(e) cold start `rag --help`"]
FIGURE_LINE = re.compile(r"^(?P<name>\(.\) [^:]+): .+\[target (?P<target>[^:]+): "
                         r"(?P<verdict>yes|no|yes \(est\.\)|no \(est\.\)|skipped)\]")


def test_smoke_run_prints_every_figure_with_target_and_verdict() -> None:
    corpus_dir("fastapi")
    proc = subprocess.run([sys.executable, "scripts/bench.py", "--smoke"], cwd=REPO,
                          capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    verdicts = {}
    for line in lines:
        match = FIGURE_LINE.match(line)
        if match:
            verdicts[match["name"]] = (match["target"], match["verdict"])
    for figure in FIGURES:
        found = [name for name in verdicts if name.startswith(figure)]
        assert found, f"no figure line for {figure!r} in:\n{proc.stdout}"
    assert verdicts["(a) indexing throughput"][0] == ">= 0.90x"
    assert verdicts["(b) re-index after a one-file edit"][0] == ">= 20x"
    assert verdicts["(e) cold start `rag --help`"][0] == "< 0.3 s"
    # The size the latency target is judged at is named, and recall is a share in [0, 1].
    recall = next(line for line in lines if line.startswith("(c) recall@10 at"))
    assert 0.0 <= float(recall.split(": ")[1].split()[0]) <= 1.0
    # Final summary table: a header and one row per figure, each ending in its verdict.
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["figure"])
    assert lines[header].split()[-1] == "holds"
    table = lines[header + 1:]
    assert len(table) == len(verdicts)
    for row, (name, (target, verdict)) in zip(table, verdicts.items()):
        assert row.startswith(name) and target in row and row.rstrip().endswith(verdict)
