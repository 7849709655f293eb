#!/usr/bin/env bash
# Shipyard's main job (see README.md), on a fresh Debian-like machine as root:
#
#     bash hack/demo.sh
#
#  1. a virtualenv .venv with Shipyard installed (the `shipyard` CLI);
#  2. the local Kubernetes cluster (hack/localcluster; reused when it runs), unless
#     SHIPYARD_USE_EXISTING_CLUSTER=1 with KUBECONFIG pointing at another cluster;
#  3. the operator image, built without Docker and imported into the cluster's containerd
#     (on an existing cluster: SHIPYARD_OPERATOR_IMAGE=REPO:TAG, an image you pushed);
#  4. `helm install` of charts/shipyard (a Helm built from the Go module proxy), the operator
#     serving the namespace shipyard-demo only;
#  5. `kubectl apply -f examples/hello-world/` in that namespace, the trials followed to the end,
#     and their rewards printed: oracle 1, nop 0.
#
# Idempotent: a second run reuses the cluster, the image and the release (helm upgrade), and
# runs the two trials again. Settings: SHIPYARD_DEMO_NAMESPACE (shipyard-demo),
# SHIPYARD_OPERATOR_NAMESPACE (shipyard-system), SHIPYARD_TASK_IMAGE (the example task's image
# on an existing cluster; default: the local cluster's localhost/shipyard/debian:bookworm).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
exec </dev/null

PYTHON="${PYTHON:-python3}"
VENV="$ROOT/.venv"
DEMO_NS="${SHIPYARD_DEMO_NAMESPACE:-shipyard-demo}"
OPERATOR_NS="${SHIPYARD_OPERATOR_NAMESPACE:-shipyard-system}"
RELEASE=shipyard
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PYTHONDONTWRITEBYTECODE=1
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
    export PATH="/usr/local/go/bin:$PATH"
fi

STARTED=$SECONDS
STEP_STARTED=$SECONDS
TIMINGS=()
step() {
    if [ -n "${STEP_NAME:-}" ]; then
        TIMINGS+=("$(printf '%-66s %5ss' "$STEP_NAME" "$((SECONDS - STEP_STARTED))")")
    fi
    STEP_NAME="$1"
    STEP_STARTED=$SECONDS
    echo
    echo "==> $1"
}
die() {
    echo "hack/demo.sh: $*" >&2
    exit 1
}

# ------------------------------------------------------------------ 1. virtualenv
step "python virtualenv (.venv)"
# shellcheck source=hack/venv.sh
. "$ROOT/hack/venv.sh"
ensure_venv "$VENV" .
echo "$("$VENV/bin/python" --version), shipyard $("$VENV/bin/shipyard" --version | awk '{print $NF}')"

# ------------------------------------------------------------------ 2. cluster
LOCAL=1
if [ "${SHIPYARD_USE_EXISTING_CLUSTER:-}" = 1 ]; then
    LOCAL=0
    step "cluster: the existing cluster of KUBECONFIG"
    [ -n "${KUBECONFIG:-}" ] || die "SHIPYARD_USE_EXISTING_CLUSTER=1 needs KUBECONFIG"
    KUBECTL="$(command -v kubectl || true)"
    [ -n "$KUBECTL" ] || die "kubectl is not on PATH"
    [ -n "${SHIPYARD_OPERATOR_IMAGE:-}" ] ||
        die "on an existing cluster set SHIPYARD_OPERATOR_IMAGE=REPO:TAG (docker build -t ... . && docker push ...)"
else
    step "local cluster (hack/localcluster/localcluster.py up)"
    [ "$(id -u)" = 0 ] || die "the local cluster needs root (or set SHIPYARD_USE_EXISTING_CLUSTER=1 and KUBECONFIG)"
    command -v go >/dev/null 2>&1 || die "Go >= 1.26 is needed to build the local cluster's Kubernetes and Helm"
    python3 hack/localcluster/localcluster.py up
    eval "$(python3 hack/localcluster/localcluster.py env)"
    KUBECTL="$(command -v kubectl)"   # the cluster's own kubectl, first on PATH after `env`
fi
export KUBECONFIG
kubectl() { "$KUBECTL" "$@"; }
kubectl version 2>/dev/null | sed -n 's/^Server Version: /server: Kubernetes /p'

# ------------------------------------------------------------------ 3. operator image
if [ "$LOCAL" = 1 ]; then
    step "operator image (built without Docker, imported)"
    IMAGE="$("$VENV/bin/python" hack/localcluster/operator_image.py import)"
    PULL_POLICY=Never
else
    step "operator image"
    IMAGE="$SHIPYARD_OPERATOR_IMAGE"
    PULL_POLICY=IfNotPresent
fi
echo "image: $IMAGE"

# ------------------------------------------------------------------ 4. helm install
step "Helm (hack/helm.sh)"
bash hack/helm.sh version --short
step "helm upgrade --install (operator Ready)"
kubectl apply -f charts/shipyard/crds/ >/dev/null   # Helm does not upgrade crds/
for crd in tasks.shipyard.dev trials.shipyard.dev sweeps.shipyard.dev; do
    kubectl wait --for=condition=Established "crd/$crd" --timeout=60s >/dev/null
done
kubectl create namespace "$DEMO_NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
bash hack/helm.sh upgrade --install "$RELEASE" charts/shipyard \
    --namespace "$OPERATOR_NS" --create-namespace \
    --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" \
    --set image.pullPolicy="$PULL_POLICY" \
    --set rbac.clusterWide=false --set "watchNamespaces={$DEMO_NS}" \
    --wait --timeout 180s >/dev/null
# The chart names its objects after the release when the release name contains "shipyard".
kubectl -n "$OPERATOR_NS" rollout status "deployment/$RELEASE" --timeout=180s
kubectl -n "$OPERATOR_NS" get pods -l app.kubernetes.io/instance="$RELEASE" -o wide

# ------------------------------------------------------------------ 5. hello-world
step "kubectl apply -f examples/hello-world/ (namespace $DEMO_NS)"
# Trials are immutable and run once: a second demo run replaces them to run them again.
kubectl -n "$DEMO_NS" delete --ignore-not-found --wait=true \
    -f examples/hello-world/trial-oracle.yaml -f examples/hello-world/trial-nop.yaml >/dev/null
if [ -n "${SHIPYARD_TASK_IMAGE:-}" ]; then
    sed "s|localhost/shipyard/debian:bookworm|$SHIPYARD_TASK_IMAGE|" examples/hello-world/task.yaml |
        kubectl -n "$DEMO_NS" apply -f -
    kubectl -n "$DEMO_NS" apply -f examples/hello-world/trial-oracle.yaml -f examples/hello-world/trial-nop.yaml
else
    kubectl -n "$DEMO_NS" apply -f examples/hello-world/
fi
step "trials (following them to their rewards)"
rc=0
for trial in hello-world-oracle hello-world-nop; do
    shipyard watch "$trial" -n "$DEMO_NS" --timeout 300 || rc=$?
done
kubectl -n "$DEMO_NS" get trials
step "done"

echo
echo "timings:"
printf '  %s\n' "${TIMINGS[@]}"
echo
oracle="$(kubectl -n "$DEMO_NS" get trial hello-world-oracle -o jsonpath='{.status.reward}')"
nop="$(kubectl -n "$DEMO_NS" get trial hello-world-nop -o jsonpath='{.status.reward}')"
echo "hello-world reward: oracle ${oracle:-none}, nop ${nop:-none}   (total $((SECONDS - STARTED))s)"
[ "$rc" = 0 ] && [ "$oracle" = 1 ] && [ "$nop" = 0 ] || die "the hello-world trials did not give oracle 1 and nop 0"
echo "Next: shipyard run examples/multi-step/task --watch -n $DEMO_NS   (see examples/README.md)"
