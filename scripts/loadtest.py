"""Load test for `rag serve`: concurrent /search and /ask with a re-index in the middle.

Bounded in count (--requests) and time (--max-seconds); loopback only. Prints p50 and p95
latency per endpoint, the index versions each endpoint saw, and the error count. Exits 0
only when every request ran and none failed.

    RAG_TOKEN=rag_... python scripts/loadtest.py --url http://127.0.0.1:8000 --requests 200

The API token in RAG_TOKEN (from `rag token add`) is sent with every request; the re-index
needs one.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

QUERIES = (
    "Which port does the server listen on by default?",
    "How do I install from source?",
    "Where is the configuration file?",
    "How do I change the retention period?",
    "What should I do when the port is already in use?",
    "How is the admin token rotated?",
    "Which operating systems are supported?",
    "How much disk space does it need?",
)
GROUPS = ((), ("staff",))


@dataclass
class Result:
    endpoint: str
    seconds: float
    error: str | None = None
    version: str | None = None


@dataclass
class Tally:
    results: list[Result] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, result: Result) -> None:
        with self.lock:
            self.results.append(result)

    def done(self) -> int:
        with self.lock:
            return len(self.results)


def loopback_url(url: str) -> str:
    """The base URL without a trailing slash; refuse anything that is not 127.0.0.1."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or parts.hostname != "127.0.0.1" or not parts.port:
        print(f"error: --url must be http://127.0.0.1:PORT (got {url!r}); "
              "this load test only targets a server on this machine", file=sys.stderr)
        raise SystemExit(2)
    return f"http://127.0.0.1:{parts.port}"


def call(base: str, method: str, path: str, body: dict | None, timeout: float) -> Any:
    """JSON response of one request; raises RuntimeError with one line on any failure."""
    data = None if body is None else json.dumps(body).encode("utf-8")
    headers = {"Content-Type": "application/json"}
    if os.environ.get("RAG_TOKEN"):
        headers["Authorization"] = f"Bearer {os.environ['RAG_TOKEN']}"
    request = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=max(timeout, 0.1)) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as exc:
        try:
            detail = json.load(exc).get("error", "")
        except (ValueError, AttributeError):
            detail = ""
        raise RuntimeError(f"HTTP {exc.code} {detail}".strip()) from None
    except (OSError, ValueError) as exc:  # refused, reset, timed out, not JSON
        raise RuntimeError(f"{type(exc).__name__}: {exc}") from None


def check_search(body: Any) -> str | None:
    if not isinstance(body, dict) or not isinstance(body.get("hits"), list):
        return "search: no hits list"
    for hit in body["hits"]:
        if not {"source_path", "start_line", "end_line", "chunk_id", "text"} <= set(hit):
            return "search: a hit lacks its place or text"
    return None


def check_ask(body: Any) -> str | None:
    if not isinstance(body, dict) or not isinstance(body.get("answer"), str):
        return "ask: no answer"
    for cite in body.get("citations", []):
        # The docs do not change during the run, so every cited line must be shown.
        if not cite.get("lines") or cite.get("lines_note"):
            return f"ask: citation {cite.get('source_path')} came without its lines"
    return None


def one_request(base: str, n: int, deadline: float, tally: Tally) -> None:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return  # not run: the summary counts it as missing
    query, groups = QUERIES[n % len(QUERIES)], GROUPS[(n // 2) % len(GROUPS)]
    if n % 2 == 0:
        endpoint, method, body = "/search", "GET", None
        path = "/search?" + urllib.parse.urlencode({"q": query, "k": 5,
                                                    "groups": ",".join(groups)})
        check = check_search
    else:
        endpoint, method, path, check = "/ask", "POST", "/ask", check_ask
        body = {"question": query, "groups": list(groups)}
    started = time.monotonic()
    try:
        reply = call(base, method, path, body, min(remaining, 60.0))
        error, version = check(reply), reply.get("version") or reply.get("index_version")
    except RuntimeError as exc:
        error, version = str(exc), None
    tally.add(Result(endpoint, time.monotonic() - started, error, version))


def reindex_midway(base: str, total: int, deadline: float, tally: Tally,
                   out: list[Result]) -> None:
    """POST /index once half of the requests have finished."""
    while tally.done() < total // 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    try:
        reply = call(base, "POST", "/index", {}, deadline - started)
        out.append(Result("/index", time.monotonic() - started, None, reply.get("version")))
    except RuntimeError as exc:
        out.append(Result("/index", time.monotonic() - started, str(exc)))


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def wait_ready(base: str, seconds: float) -> dict:
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call(base, "GET", "/health", None, 2.0)
        except RuntimeError as exc:
            if time.monotonic() > deadline:
                print(f"error: no server answers at {base}/health ({exc})", file=sys.stderr)
                raise SystemExit(2) from None
            time.sleep(0.2)


def report(results: list[Result], total: int, reindexed: bool) -> int:
    """Print the summary table; the number of errors (missing requests count as errors)."""
    print(f"{'endpoint':<9} {'count':>6} {'errors':>6} {'p50 ms':>8} {'p95 ms':>8} "
          f"{'max ms':>8}  versions seen")
    for endpoint in ("/search", "/ask", "/index"):
        rows = [r for r in results if r.endpoint == endpoint]
        if not rows:
            continue
        ms = [r.seconds * 1000 for r in rows]
        versions = sorted({r.version for r in rows if r.version})
        print(f"{endpoint:<9} {len(rows):>6} {sum(r.error is not None for r in rows):>6} "
              f"{percentile(ms, 50):>8.1f} {percentile(ms, 95):>8.1f} {max(ms):>8.1f}  "
              f"{len(versions)}")
    errors = [r for r in results if r.error]
    for r in errors[:10]:
        print(f"error {r.endpoint}: {r.error}")
    ran = sum(r.endpoint != "/index" for r in results)
    missing = total - ran
    if missing:
        print(f"stopped at the time limit: {missing} of {total} requests did not run")
    if not reindexed:
        print("the re-index did not run")
    count = len(errors) + missing + (0 if reindexed else 1)
    print(f"errors: {count}")
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="http://127.0.0.1:PORT")
    parser.add_argument("--requests", type=int, default=200, help="/search + /ask requests")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight")
    parser.add_argument("--max-seconds", type=float, default=60, help="stop starting new ones")
    parser.add_argument("--wait-seconds", type=float, default=10, help="for /health at start")
    parser.add_argument("--no-reindex", action="store_true", help="skip the POST /index")
    args = parser.parse_args(argv)
    if not 1 <= args.requests <= 100_000 or not 1 <= args.concurrency <= 256:
        parser.error("--requests must be 1..100000 and --concurrency 1..256")
    base = loopback_url(args.url)
    health = wait_ready(base, args.wait_seconds)
    print(f"{base}: {health.get('chunks')} chunks, version {health.get('version')}; "
          f"{args.requests} requests, {args.concurrency} at a time")
    started = time.monotonic()
    deadline = started + args.max_seconds
    tally, index_result = Tally(), []  # type: ignore[var-annotated]
    reindexer = None
    if not args.no_reindex:
        reindexer = threading.Thread(target=reindex_midway, daemon=True,
                                     args=(base, args.requests, deadline, tally, index_result))
        reindexer.start()
    with ThreadPoolExecutor(args.concurrency) as pool:
        for n in range(args.requests):
            pool.submit(one_request, base, n, deadline, tally)
    if reindexer is not None:
        reindexer.join(max(deadline - time.monotonic(), 0) + 1)
    elapsed = time.monotonic() - started
    print(f"{tally.done()} requests in {elapsed:.1f} s ({tally.done() / elapsed:.1f}/s)")
    reindexed = args.no_reindex or bool(index_result)
    return 1 if report(tally.results + index_result, args.requests, reindexed) else 0


if __name__ == "__main__":
    sys.exit(main())
