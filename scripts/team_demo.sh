#!/usr/bin/env bash
# The team set-up on one machine: one PostgreSQL (pgvector) index, two `rag serve` processes.
#
# Starts PostgreSQL from pgserver (no system install), indexes corpus/ into it, starts two
# servers on loopback ports, asks both the same question, edits a doc and re-indexes while
# they serve, asks again, then stops everything. Exits 0 only when both servers gave the
# same verified citations each time, and the second answer cites the edited line.
#
#     PYTHON=.venv/bin/python bash scripts/team_demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PYTHON:-$REPO/.venv/bin/python}
QUESTION="Which port does rag serve listen on by default?"
WORK=$(mktemp -d /tmp/rag-team-demo-XXXXXX)
PIDS=()
export HF_HUB_OFFLINE=1 PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
export RAG_STORE__KIND=postgres RAG_GENERATION__GENERATOR=extractive

stop_all() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    if [ -d "$WORK/pg" ]; then
        "$PY" -c "import sys, pgserver; pgserver.get_server(sys.argv[1], cleanup_mode='delete').cleanup()" \
            "$WORK/pg" >/dev/null 2>&1 || echo "warning: PostgreSQL in $WORK/pg did not stop" >&2
    fi
    rm -rf "$WORK"
}
trap stop_all EXIT INT TERM

free_port() { "$PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }

wait_healthy() {  # url pid
    for _ in $(seq 1 240); do
        kill -0 "$2" 2>/dev/null || { echo "error: server $1 exited; log:" >&2; cat "$WORK"/serve-*.log >&2; exit 2; }
        curl -sf "$1/health" >/dev/null && return 0
        sleep 0.5
    done
    echo "error: server $1 did not become healthy" >&2; exit 2
}

version_of() { curl -sf "$1/health" | "$PY" -c "import json, sys; print(json.load(sys.stdin)['version'])"; }

ask() {  # url outfile
    curl -sf -X POST "$1/ask" -H 'Content-Type: application/json' \
        -d "$("$PY" -c 'import json, sys; print(json.dumps({"question": sys.argv[1]}))' "$QUESTION")" >"$2"
}

compare() {  # round label, must-contain text
    "$PY" - "$WORK/a.json" "$WORK/b.json" "$1" "$2" <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
label, must = sys.argv[3], sys.argv[4]

def cited(answer):
    # Verified citations: place plus the lines the server re-read from the docs file.
    return [(c["source_path"], c["start_line"], c["end_line"],
             tuple(line["text"] for line in c["lines"]), c["lines_note"])
            for c in answer["citations"]]

ca, cb = cited(a), cited(b)
print(f"{label}: server A (index {a['index_version']}) and B (index {b['index_version']})")
for path, start, end, _, note in ca:
    print(f"  cites {path}:{start}-{end}" + (f" ({note})" if note else ""))
problems = []
if not ca:
    problems.append("no verified citation")
if ca != cb:
    problems.append(f"citations differ: A {[c[:3] for c in ca]} B {[c[:3] for c in cb]}")
if a["index_version"] != b["index_version"]:
    problems.append("the servers answered from different index versions")
if any(note or not lines for *_, lines, note in ca):
    problems.append("a citation came without its verified lines")
if must and not any(must in text for *_, lines, _ in ca for text in lines):
    problems.append(f"no cited line contains {must!r}")
print(f"  {'identical verified citations' if not problems else 'MISMATCH: ' + '; '.join(problems)}")
sys.exit(1 if problems else 0)
EOF
}

cp -r corpus "$WORK/docs"
mkdir -p "$WORK/pg"
echo "starting PostgreSQL (pgserver) in $WORK/pg"
DSN=$("$PY" -c "import sys, pgserver; print(pgserver.get_server(sys.argv[1], cleanup_mode=None).get_uri())" "$WORK/pg" 2>/dev/null)
export RAG_STORE__DSN=$DSN
echo "indexing corpus/ into PostgreSQL"
"$PY" -m rag.interfaces.cli.main index "$WORK/docs" --json >/dev/null

URLS=()
for name in a b; do
    port=$(free_port)
    "$PY" -m rag.interfaces.cli.main serve --docs "$WORK/docs" --port "$port" >"$WORK/serve-$name.log" 2>&1 &
    PIDS+=($!)
    URLS+=("http://127.0.0.1:$port")
done
wait_healthy "${URLS[0]}" "${PIDS[0]}"
wait_healthy "${URLS[1]}" "${PIDS[1]}"
echo "two servers: ${URLS[0]} ${URLS[1]}"
echo "question: $QUESTION"

ask "${URLS[0]}" "$WORK/a.json"; ask "${URLS[1]}" "$WORK/b.json"
compare "before the edit" "8000 by default"
before=$(version_of "${URLS[0]}")

echo "editing reference/cli.md (default port 8000 -> 8080) and re-indexing while both serve"
sed -i 's/(8000 by default, on 127\.0\.0\.1)/(8080 by default, on 127.0.0.1)/' "$WORK/docs/reference/cli.md"
"$PY" -m rag.interfaces.cli.main index "$WORK/docs"
for _ in $(seq 1 60); do  # each server notices the new current version within a second
    [ "$(version_of "${URLS[0]}")" != "$before" ] && [ "$(version_of "${URLS[1]}")" != "$before" ] && break
    sleep 0.5
done

ask "${URLS[0]}" "$WORK/a.json"; ask "${URLS[1]}" "$WORK/b.json"
compare "after the edit" "8080 by default"
echo "ok: both servers gave identical verified citations before and after the re-index"
