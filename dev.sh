#!/usr/bin/env bash
# shardpipe developer entry point: sets up .venv (Python >= 3.12) and runs a task.
#   ./dev.sh demo    set up, then write ~1 GiB on a LocalCluster, verify it, print throughput
#   ./dev.sh test    set up, then ruff + mypy + the whole pytest suite
#   ./dev.sh bench   set up, then run the benchmark suite (see benchmarks/README.md)
set -euo pipefail
cd "$(dirname "$0")"

find_python() {
    local cand
    for cand in python3.12 python3.13 python3; do
        if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
            command -v "$cand"; return 0
        fi
    done
    # pyenv installs that are not the global version are not on PATH through the shims
    for cand in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3; do
        if [ -x "$cand" ]; then echo "$cand"; return 0; fi
    done
    echo "dev.sh: no Python >= 3.12 found; install one (e.g. pyenv install 3.12)" >&2
    return 1
}

setup() {
    local extras="$1"
    if [ ! -x .venv/bin/python ]; then
        "$(find_python)" -m venv .venv
        .venv/bin/python -m pip install --quiet --upgrade pip
    fi
    .venv/bin/python -m pip install --quiet -e ".[$extras]"
}

task="${1:-}"; shift || true
case "$task" in
    demo)  setup test;  exec .venv/bin/python -m shardpipe.demo "$@" ;;
    test)
        setup test
        .venv/bin/ruff check shardpipe tests benchmarks
        .venv/bin/ruff format --check shardpipe tests benchmarks
        .venv/bin/mypy
        exec .venv/bin/python -m pytest "$@" ;;
    bench) setup "test,bench"; exec .venv/bin/python -m benchmarks "$@" ;;
    *) echo "usage: ./dev.sh {demo|test|bench} [args...]" >&2; exit 2 ;;
esac
