"""Benchmark the local generator: answer time over eval questions, wall clock and CPU.

    python scripts/bench_local.py --index indexes/fastapi --cases /path/to/fastapi.jsonl -n 20

Runs the first N answerable questions through retrieval, evidence selection and the local
model (the real pipeline, local settings from configs/default.toml), and prints p50/p95 of
the generation wall time and of the CPU seconds the model server spent per answer. Wall
time depends on what else the machine runs (the load average is printed); CPU seconds do
not, much: on idle cores, wall time is about CPU seconds divided by the threads used.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--cases", type=Path, required=True, help="eval JSON Lines")
    ap.add_argument("-n", type=int, default=20, help="answerable questions to ask")
    ap.add_argument("--threads", type=int, default=0, help="0: one per free core")
    args = ap.parse_args()

    from rag.core.config import load_settings
    from rag.generator.local.model import LocalGenerator
    from rag.pipeline import Pipeline

    settings = load_settings()
    settings.generation.local_threads = args.threads
    cases = [json.loads(line) for line in args.cases.read_text().splitlines() if line.strip()]
    questions = [c["question"] for c in cases if c.get("answerable", True)][: args.n]
    load_before = os.getloadavg()[0]
    walls: list[float] = []
    cpus: list[float] = []
    tokens: list[tuple[int, int]] = []
    with Pipeline(args.index, settings, generator="local") as pipeline:
        generator = pipeline.generator()
        assert isinstance(generator, LocalGenerator) and generator.server is not None
        pid = generator.server.pid
        assert pid is not None
        for question in questions:
            evidence = pipeline.select(question, pipeline.retriever.search(question),
                                       frozenset()).evidence
            cpu0, t0 = cpu_seconds(pid), time.perf_counter()
            try:
                result = generator.generate(question, evidence)
                tokens.append((result.prompt_tokens, result.completion_tokens))
            except Exception as exc:  # noqa: BLE001 - a failed answer still took its time
                print(f"failed: {question[:60]}: {exc}", file=sys.stderr)
            walls.append(time.perf_counter() - t0)
            cpus.append(cpu_seconds(pid) - cpu0)
        threads = generator.server.threads
    print(f"questions {len(questions)}, threads {threads}, load average "
          f"{load_before:.1f} before / {os.getloadavg()[0]:.1f} after")
    print(f"generation wall s  p50 {pct(walls, 0.5):.2f}  p95 {pct(walls, 0.95):.2f}")
    print(f"server CPU s       p50 {pct(cpus, 0.5):.2f}  p95 {pct(cpus, 0.95):.2f}")
    if tokens:
        print(f"tokens per answer  prompt {statistics.median(t[0] for t in tokens):.0f}  "
              f"completion {statistics.median(t[1] for t in tokens):.0f} (medians, all "
              f"attempts)")


if __name__ == "__main__":
    main()
