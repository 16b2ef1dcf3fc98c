#!/usr/bin/env bash
# shardpipe developer entry point: sets up .venv (Python >= 3.12) and runs a task.
#   ./dev.sh demo    set up (runtime dependencies only), then write ~1 GiB on a LocalCluster,
#                    verify it, print throughput
#   ./dev.sh test    set up (+ test and docs extras, and the Azurite emulator from npm), then
#                    ruff, mypy, the layer contracts (lint-imports), the documentation site
#                    (docs/, warnings as errors)
#                    and the whole pytest suite, in parallel (a worker per core, and one more)
#   ./dev.sh bench   set up (+ test and bench extras), then run the benchmark suite
#                    (see benchmarks/README.md)
#   ./dev.sh lock    regenerate requirements/constraints.txt from pyproject.toml
#                    (keeps current pins where it can; `./dev.sh lock --upgrade` moves them all)
#
# Every install is pinned by requirements/constraints.txt, so nothing is resolved afresh
# (no pip backtracking over boto3/botocore/aiobotocore). uv, itself installed into .venv
# with pip, does the installing; a re-run on an existing .venv is a quick no-op. Without uv
# (SHARDPIPE_INSTALLER=pip, or uv cannot be installed, or it fails) pip installs the same pins.
set -euo pipefail
cd "$(dirname "$0")"

CONSTRAINTS=requirements/constraints.txt

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

make_venv() {
    if [ ! -x .venv/bin/python ]; then
        "$(find_python)" -m venv .venv
    fi
}

# uv in .venv at the version pinned in the constraints file; fails if it cannot be had.
ensure_uv() {
    [ "${SHARDPIPE_INSTALLER:-uv}" != pip ] || return 1
    local want=""
    [ -f "$CONSTRAINTS" ] && want="$(sed -n 's/^uv==\([^ ;]*\).*/\1/p' "$CONSTRAINTS")"
    if [ -n "$want" ] && [ -x .venv/bin/uv ] && [ "$(.venv/bin/uv --version | cut -d' ' -f2)" = "$want" ]; then
        return 0
    fi
    if ! .venv/bin/python -m pip install --quiet "uv${want:+==$want}"; then
        echo "dev.sh: could not install uv into .venv; using pip" >&2
        return 1
    fi
}

# Install shardpipe (editable) with the given extras ("" for none) into .venv, pinned.
setup() {
    local spec="."
    [ -z "${1:-}" ] || spec=".[$1]"
    make_venv
    if ensure_uv; then
        # --compile-bytecode: as pip does; without it, under PYTHONDONTWRITEBYTECODE=1 every
        # import (each test, each cluster worker) compiles dask, pandas, zarr... again
        if .venv/bin/uv pip install --quiet --compile-bytecode --python .venv/bin/python \
            -c "$CONSTRAINTS" --build-constraints "$CONSTRAINTS" -e "$spec"; then
            return 0
        fi
        echo "dev.sh: uv pip install failed; retrying with pip" >&2
    fi
    .venv/bin/python -m pip install --quiet -c "$CONSTRAINTS" -e "$spec"
}

# Azurite, the Azure Blob emulator the Azure tests start, from npm into .venv/azurite (node
# and npm are needed: the tests of the Azure backend cannot run without it).
AZURITE_VERSION=3.37.0
ensure_azurite() {
    local bin=.venv/azurite/node_modules/.bin/azurite-blob
    if [ -x "$bin" ] && [ "$(cat .venv/azurite/version 2>/dev/null)" = "$AZURITE_VERSION" ]; then
        return 0
    fi
    command -v npm >/dev/null 2>&1 || { echo "dev.sh: npm is needed to install Azurite (node >= 18)" >&2; return 1; }
    npm install --silent --no-audit --no-fund --prefix .venv/azurite "azurite@$AZURITE_VERSION" >/dev/null
    echo "$AZURITE_VERSION" > .venv/azurite/version
}

task="${1:-}"; shift || true
case "$task" in
    demo)  setup "";  exec .venv/bin/python -m shardpipe.cli.demo "$@" ;;
    test)
        setup test,docs
        ensure_azurite
        .venv/bin/ruff check shardpipe tests benchmarks
        .venv/bin/ruff format --check shardpipe tests benchmarks
        .venv/bin/mypy
        .venv/bin/lint-imports --no-cache
        # the documentation site, afresh (-E): warnings are errors, every reference resolves
        .venv/bin/sphinx-build -E -W --keep-going -n -q -b html docs docs/_build/html
        # in parallel (pytest-xdist), one worker more than the cores: a share of the tests
        # wait on servers, timeouts and killed children, and the extra worker keeps the
        # cores busy meanwhile (2 cores, pytest: 7:48 with 3 workers, 8:30 with 2).
        # SHARDPIPE_TEST_WORKERS=0 runs in one process. worksteal: an idle worker takes
        # tests queued on a busy one, so the few long tests (docs pages, notebooks, kill -9
        # runs) do not leave a worker waiting at the end
        workers="${SHARDPIPE_TEST_WORKERS:-$(( $(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN) + 1 ))}"
        exec .venv/bin/python -m pytest -n "$workers" --dist worksteal "$@" ;;
    bench) setup "test,bench"; ensure_azurite; exec .venv/bin/python -m benchmarks "$@" ;;
    lock)
        make_venv
        ensure_uv || { echo "dev.sh lock: needs uv" >&2; exit 1; }
        exec .venv/bin/uv pip compile pyproject.toml requirements/tools.in --all-extras \
            --universal --python-version 3.12 --custom-compile-command "./dev.sh lock" \
            -o "$CONSTRAINTS" "$@" ;;
    *) echo "usage: ./dev.sh {demo|test|bench|lock} [args...]" >&2; exit 2 ;;
esac
