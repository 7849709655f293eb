#!/usr/bin/env bash
# Helm, built from the Go module proxy at the release pinned in hack/helm/go.mod, then run:
#
#     bash hack/helm.sh [HELM ARGS...]       e.g. bash hack/helm.sh lint charts/shipyard
#     bash hack/helm.sh --path               print the path of the cached binary (building it)
#     bash hack/helm.sh --check-chart        helm lint + helm template of charts/shipyard in
#                                            its three RBAC modes (what CI runs)
#
# The binary is cached in ${SHIPYARD_CACHE:-~/.cache/shipyard}/helm-<version>/helm; a cold build
# takes about a minute and a half on 2 cores (with Go's module cache warm: seconds).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODULE="$ROOT/hack/helm"
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
    export PATH="/usr/local/go/bin:$PATH"
fi

VERSION="$(awk '$1 == "require" && $2 == "helm.sh/helm/v3" { print $3 }' "$MODULE/go.mod")"
[ -n "$VERSION" ] || { echo "hack/helm.sh: no helm.sh/helm/v3 version in $MODULE/go.mod" >&2; exit 1; }
CACHE="${SHIPYARD_CACHE:-$HOME/.cache/shipyard}/helm-$VERSION"
HELM="$CACHE/helm"

if [ ! -x "$HELM" ]; then
    command -v go >/dev/null 2>&1 || { echo "hack/helm.sh: Go is needed to build Helm" >&2; exit 1; }
    echo "hack/helm.sh: building Helm $VERSION from the Go module proxy into $CACHE" >&2
    mkdir -p "$CACHE"
    (
        cd "$MODULE"
        # As Helm's Makefile: the default Kubernetes version for `helm template`/`lint` follows
        # the client-go Helm is built with (v0.X.Y -> 1.X).
        k8s_minor="$(GOFLAGS=-mod=mod go list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2)"
        ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$VERSION"
        ldflags="$ldflags -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
        for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
            ldflags="$ldflags -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
        done
        CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" \
            -o "$HELM.partial.$$" helm.sh/helm/v3/cmd/helm
    )
    mv "$HELM.partial.$$" "$HELM"
fi

case "${1:-}" in
--path)
    echo "$HELM"
    ;;
--check-chart)
    CHART="$ROOT/charts/shipyard"
    "$HELM" lint --strict "$CHART"
    "$HELM" lint --strict "$CHART" --set 'watchNamespaces={team-a,team-b}'
    "$HELM" lint --strict "$CHART" --set rbac.clusterWide=true
    "$HELM" template shipyard "$CHART" --namespace shipyard-system >/dev/null
    "$HELM" template shipyard "$CHART" --namespace shipyard-system \
        --set 'watchNamespaces={team-a,team-b}' >/dev/null
    "$HELM" template shipyard "$CHART" --namespace shipyard-system \
        --set rbac.clusterWide=true >/dev/null
    # Image builds: buildkitd (privileged, and rootless) with mirrors and a node selector.
    for rootless in false true; do
        out="$("$HELM" template shipyard "$CHART" --namespace shipyard-system \
            --set builds.backend=buildkit --set builds.registry=registry.example/shipyard \
            --set builds.buildkitd.rootless=$rootless --set 'builds.mirrors.docker\.io=m:5000' \
            --set builds.buildkitd.nodeSelector.pool=builds)"
        for want in "kind: Service" "name: shipyard-buildkitd" 'mirrors = ["m:5000"]' \
                "pool: builds" "tcp://shipyard-buildkitd.shipyard-system.svc:1234"; do
            grep -qF -- "$want" <<<"$out" ||
                { echo "hack/helm.sh: builds (rootless=$rootless): no '$want'" >&2; exit 1; }
        done
        if [ "$rootless" = true ]; then
            grep -qF -- "--oci-worker-no-process-sandbox" <<<"$out" ||
                { echo "hack/helm.sh: rootless buildkitd without its flag" >&2; exit 1; }
        else
            grep -qF "privileged: true" <<<"$out" ||
                { echo "hack/helm.sh: buildkitd is not privileged" >&2; exit 1; }
        fi
    done
    # The schema must refuse nonsense.
    if "$HELM" template shipyard "$CHART" --set builds.backend=kaniko >/dev/null 2>&1; then
        echo "hack/helm.sh: values.schema.json accepted builds.backend=kaniko" >&2
        exit 1
    fi
    if "$HELM" template shipyard "$CHART" --set replicaCount=two >/dev/null 2>&1; then
        echo "hack/helm.sh: values.schema.json accepted replicaCount=two" >&2
        exit 1
    fi
    echo "charts/shipyard: helm lint and helm template passed (Helm $VERSION)"
    ;;
*)
    exec "$HELM" "$@"
    ;;
esac
