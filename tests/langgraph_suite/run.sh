#!/usr/bin/env bash
# Runs LangGraph's own test suite (libs/langgraph/tests) with TelarSaver on the file store.
#
# Usage: tests/langgraph_suite/run.sh LANGGRAPH_DIR [pytest arguments...]
#   (arguments that name tests/... paths or node ids replace the default, their whole tests/)
#   LANGGRAPH_DIR  a checkout of LangGraph's libs/langgraph (it holds pyproject.toml, langgraph/
#                  and tests/); this script neither fetches nor contains LangGraph's code.
# Environment:
#   LGSUITE_VENV     the venv to use, created and filled on first use (default /tmp/telar-lgsuite-venv);
#                    it gets that checkout's langgraph, this repository's telar-checkpoint (editable)
#                    and their test dependencies, never touching any other venv.
#   LGSUITE_SAVER    telar (default), telar_keep (TelarSaver(keep_finished_subgraphs=True)),
#                    telar_shadow (dropped checkpoints served from an InMemorySaver beside it),
#                    memory (InMemorySaver, the reference), both (memory, then telar) or all
#                    (memory, telar, then telar_keep).
#   LGSUITE_RESULTS  where the outcome files and logs go (default /tmp/telar-lgsuite-results).
#   LGSUITE_TIMEOUT  bound on each whole pytest run, seconds (default 2400); each test is bounded
#                    to 120 s by pytest-timeout.
# Exit status: for a TelarSaver run, that of compare.py (0 when every failure is in by_design.txt
# for that mode and every listed test that ran failed as expected; 1 otherwise), else 0.
set -euo pipefail

if [[ $# -lt 1 || ! -f "$1/tests/conftest.py" || ! -f "$1/pyproject.toml" ]]; then
    echo "usage: $0 LANGGRAPH_DIR [pytest arguments...]" >&2
    echo "  LANGGRAPH_DIR: a checkout of LangGraph's libs/langgraph (with tests/conftest.py)" >&2
    exit 2
fi
langgraph_dir=$(cd "$1" && pwd)
shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv=${LGSUITE_VENV:-/tmp/telar-lgsuite-venv}
saver=${LGSUITE_SAVER:-telar}
results=${LGSUITE_RESULTS:-/tmp/telar-lgsuite-results}
run_timeout=${LGSUITE_TIMEOUT:-2400}
case $saver in
    telar | telar_keep | telar_shadow | memory) modes=("$saver") ;;
    both) modes=(memory telar) ;;
    all) modes=(memory telar telar_keep) ;;
    *) echo "LGSUITE_SAVER must be telar, telar_keep, telar_shadow, memory, both or all" >&2; exit 2 ;;
esac

# Their test dependencies that the checkpointer tests need (their dependency group "test",
# less coverage, profiling, the watcher and the CLI server), plus pytest-timeout.
test_deps=(pytest pytest-mock pytest-dotenv pytest-repeat pytest-xdist pytest-timeout syrupy httpx anyio
    langgraph-prebuilt langgraph-checkpoint-sqlite langgraph-checkpoint-postgres "psycopg[binary,pool]"
    redis pycryptodome)

stamp="$venv/.telar-lgsuite-installed"
wanted="$langgraph_dir $repo ${test_deps[*]}"
if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv"
fi
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$wanted" ]]; then
    timeout 900 "$venv/bin/python" -m pip install --quiet --upgrade pip
    timeout 900 "$venv/bin/python" -m pip install --quiet "$langgraph_dir" -e "$repo" "${test_deps[@]}"
    echo "$wanted" >"$stamp"
fi
"$venv/bin/python" -c 'import importlib.metadata as m; print("langgraph", m.version("langgraph"), "| langgraph-checkpoint", m.version("langgraph-checkpoint"), "| langchain-core", m.version("langchain-core"))'

mkdir -p "$results"
run_suite() {  # $1: telar, telar_keep or memory; the rest: pytest arguments
    local which=$1
    shift
    local where=(tests)  # their whole suite, unless the arguments name tests/... paths
    for arg in "$@"; do [[ $arg == tests* ]] && where=(); done
    echo "== LangGraph's suite with ${which} (log: $results/$which.log)"
    local start=$SECONDS status=0
    (cd "$langgraph_dir" &&
        NO_DOCKER=true TELAR_LGSUITE_SAVER=$which TELAR_LGSUITE_RESULTS="$results/$which.json" \
            PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" \
            timeout "$run_timeout" "$venv/bin/python" -m pytest "${where[@]}" \
            -p telar_lgsuite_plugin -p no:cacheprovider -o addopts= --snapshot-warn-unused \
            --timeout 120 -q -rfE "$@") >"$results/$which.log" 2>&1 || status=$?
    tail -n 1 "$results/$which.log"
    echo "   pytest exit $status after $((SECONDS - start)) s"
    return 0
}

status=0
for mode in "${modes[@]}"; do
    run_suite "$mode" "$@"
    [[ $mode == memory ]] && continue
    reference=()
    [[ -f $results/memory.json && " ${modes[*]} " == *" memory "* ]] && reference=("$results/memory.json")
    "$venv/bin/python" "$here/compare.py" --mode "$mode" "$results/$mode.json" "${reference[@]}" || status=1
done
exit $status
