#!/usr/bin/env bash
# Shipyard's test command (see README.md):
#
#     bash hack/test.sh [PYTEST ARGS...]
#
# On a Debian-like machine as root: create or refresh the virtualenv .venv, lint (ruff, the
# import-linter layering contracts), check that crds/ matches the CRD models, bring up the local
# Kubernetes cluster (reused when it already runs) and run pytest over tests/ (unit, integration,
# e2e). Extra arguments go to pytest, e.g. `bash hack/test.sh -k crd -x`, or
# `bash hack/test.sh tests/unit`.
#
# To test against another cluster instead of the local one, set SHIPYARD_TEST_KUBECONFIG=PATH,
# or KUBECONFIG=PATH with SHIPYARD_USE_EXISTING_CLUSTER=1; the local cluster is then not started.
#
# Exits non-zero when anything fails, and also when pytest collected no tests.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PYTHON="${PYTHON:-python3}"
VENV="$ROOT/.venv"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PYTHONDONTWRITEBYTECODE=1
# Go may be installed without being on a non-login shell's PATH.
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
    export PATH="/usr/local/go/bin:$PATH"
fi

STARTED=$SECONDS
SECTION_STARTED=$SECONDS
SECTION_NAME=""
section() {
    if [ -n "$SECTION_NAME" ]; then
        echo "--- $SECTION_NAME: $((SECONDS - SECTION_STARTED))s"
    fi
    SECTION_NAME="$1"
    SECTION_STARTED=$SECONDS
    echo
    echo "=================================================================="
    echo "== $1"
    echo "=================================================================="
}

die() {
    echo "hack/test.sh: $*" >&2
    exit 1
}

# ------------------------------------------------------------------ virtualenv
section "python virtualenv (.venv)"

# shellcheck source=hack/venv.sh
. "$ROOT/hack/venv.sh"
ensure_venv "$VENV" '.[dev]'
"$VENV/bin/python" --version

# ------------------------------------------------------------------ lint
section "ruff check ."
ruff check .

section "lint-imports (layering contracts)"
lint-imports

section "the Go runner: go vet, go test (runner/)"
if command -v go >/dev/null 2>&1; then
    (cd runner && GOTOOLCHAIN=local go vet ./... && GOTOOLCHAIN=local go test ./...)
else
    echo "no Go on PATH: the runner's tests not run (the local cluster's runner build needs Go)"
fi

section "crds/ and the chart's CRDs are up to date (python -m shipyard.api.crds --check)"
python -m shipyard.api.crds --check crds
python -m shipyard.api.crds --check charts/shipyard/crds

section "examples/ manifests match their task directories (hack/examples.py --check)"
python hack/examples.py --check

section "helm lint and helm template (hack/helm.sh --check-chart)"
bash hack/helm.sh --check-chart

section "Grafana's dashboard schema, cached (hack/grafana_schema.py)"
python hack/grafana_schema.py

# ------------------------------------------------------------------ cluster
if [ -n "${SHIPYARD_TEST_KUBECONFIG:-}" ] || [ "${SHIPYARD_USE_EXISTING_CLUSTER:-}" = 1 ]; then
    section "cluster: using the configured existing cluster"
    echo "SHIPYARD_TEST_KUBECONFIG=${SHIPYARD_TEST_KUBECONFIG:-} KUBECONFIG=${KUBECONFIG:-}"
else
    section "local cluster (python3 hack/localcluster/localcluster.py up)"
    [ "$(id -u)" = 0 ] || die "the local cluster needs root (or configure an existing cluster, see README.md)"
    python3 hack/localcluster/localcluster.py up </dev/null
fi

# ------------------------------------------------------------------ tests
section "pytest"
# With no path among the arguments, run the whole of tests/.
have_path=0
for arg in "$@"; do
    case "$arg" in
    -*) ;;
    *) if [ -e "${arg%%::*}" ]; then have_path=1; fi ;;
    esac
done
if [ "$have_path" = 1 ]; then
    targets=()
else
    targets=(tests)
fi
rc=0
python -m pytest "${targets[@]}" "$@" </dev/null || rc=$?
echo "--- pytest: $((SECONDS - SECTION_STARTED))s"

echo
if [ "$rc" = 5 ]; then
    echo "hack/test.sh: FAILED: pytest collected no tests (exit code 5)" >&2
    exit 1
elif [ "$rc" != 0 ]; then
    echo "hack/test.sh: FAILED: pytest exited $rc (total $((SECONDS - STARTED))s)" >&2
    exit "$rc"
fi
echo "hack/test.sh: all checks passed in $((SECONDS - STARTED))s"
