"""Kueue (batch admission) on the local cluster, and accelerators the node advertises.

`ensure(layout, start, pids)` is called by `localcluster.py up` on a cold start and on every
reuse of a running cluster; it adds what is missing and restarts nothing else:

- **Build**: `sigs.k8s.io/kueue/cmd/kueue` at KUEUE_VERSION from the Go module proxy (the module
  ./kueue-build pins it), once, into ~/.cache/shipyard/kueue-<version>/ next to the manifests the
  module carries (CRDs, the manager's ClusterRole, the webhook configurations). Cold: about 4
  minutes on 2 cores; warm: nothing.
- **Install**: the CRDs, the namespace `kueue-system`, the manager's ClusterRole bound to the
  ServiceAccount `kueue-system/kueue-controller-manager` (Kueue runs with a client certificate
  for that name, so the RBAC is the real one), Shipyard's ClusterRole for Kueue to read Trials
  (the chart's `kueue-trial-reader`), and the webhook configurations.
- **Run** as a host process (like the other components) with a configuration that registers
  Trials as an external framework and turns the plain Pod integration on only in namespaces
  labelled `shipyard.dev/kueue-pods=true` (the cluster is shared by all tests).
- **Webhooks**: Kueue serves them on 127.0.0.1 with a certificate from the cluster's CA
  (internal certificate management off); the configurations call it by URL. Only the webhooks
  of Kueue's own kinds and of Pods are installed (the other integrations are off, and a
  Fail-policy webhook nobody serves would block every Job in the cluster).
- **Accelerators**: the node advertises `nvidia.com/gpu` and `google.com/tpu` as extended
  resources (a status patch, kept by the kubelet since no device plugin manages them) with
  GKE's accelerator labels. No device exists: a pod gets the count, never a device.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from imagebuilds import _go_build
from layout import HERE, NODE_NAME, Layout
from pki import Cert, _issue, kubeconfig

KUEUE_VERSION = "v0.17.0"  # keep in step with kueue-build/go.mod
NAMESPACE = "kueue-system"
SERVICE_ACCOUNT = "kueue-controller-manager"
WEBHOOK_PORT = 19443
HEALTH_PORT = 18081
POD_NAMESPACE_LABEL = "shipyard.dev/kueue-pods"
METRICS_CERTS = "/etc/kueue/metrics/certs"
TRIAL_FRAMEWORK = "Trial.v1alpha1.shipyard.dev"
# What the node advertises: (labels, resource, count).
ACCELERATORS = [
    ({"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}, "nvidia.com/gpu", 4),
    ({"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
      "cloud.google.com/gke-tpu-topology": "2x4"}, "google.com/tpu", 8),
]
MANIFESTS = {  # what `up` installs from the module's config/components
    "role.yaml": "rbac/role.yaml",
    "secrets-role.yaml": "rbac/manager_secrets_role.yaml",
    "webhook.yaml": "webhook/manifests.yaml",
}
CERTS = [
    Cert("kueue-webhook", "/CN=kueue-webhook", server=True, client=False),
    Cert("kueue", f"/CN=system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"),
]


class KueueError(Exception):
    pass


def kueue_dir(layout: Layout) -> Path:
    return layout.cache / f"kueue-{KUEUE_VERSION}"


def ensure_binary(layout: Layout) -> None:
    """The binary and the module's manifests, once per version."""
    out = kueue_dir(layout)
    if (out / "kueue").exists() and all((out / "config" / f).exists() for f in MANIFESTS):
        return
    _go_build("kueue-build", out, ["sigs.k8s.io/kueue/cmd/kueue"], "-s -w")
    result = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kueue"],
                            cwd=HERE / "kueue-build", capture_output=True, text=True, check=True)
    src = Path(result.stdout.strip()) / "config" / "components"
    config = out / "config"
    shutil.rmtree(config, ignore_errors=True)
    shutil.copytree(src / "crd" / "bases", config / "crds")
    for name, source in MANIFESTS.items():
        shutil.copy(src / source, config / name)
    for f in config.rglob("*"):
        f.chmod(0o644 if f.is_file() else 0o755)


def ensure_certs(layout: Layout) -> None:
    for cert in CERTS:
        if not (layout.pki / f"{cert.name}.crt").exists():
            _issue(layout.pki, cert)


def config_path(layout: Layout) -> Path:
    return layout.state / "kueue.yaml"


def webhook_cert_dir(layout: Layout) -> Path:
    return layout.state / "kueue-webhook"


def write_config(layout: Layout) -> None:
    """Kueue's configuration (JSON is YAML), its kubeconfig and its webhook certificate."""
    from components import APISERVER_URL

    certs = webhook_cert_dir(layout)
    certs.mkdir(parents=True, exist_ok=True)
    for source, name in (("kueue-webhook.crt", "tls.crt"), ("kueue-webhook.key", "tls.key")):
        data = (layout.pki / source).read_bytes()
        if not (certs / name).exists() or (certs / name).read_bytes() != data:
            (certs / f".{name}").write_bytes(data)  # Kueue watches the files: replace at once
            (certs / f".{name}").rename(certs / name)
    # Kueue reads its metrics certificate from a fixed path when it does not manage its own
    # certificates (cmd/kueue/main.go); its metrics server is off, but the file must be there.
    metrics = Path(METRICS_CERTS)
    if not metrics.exists():
        metrics.parent.mkdir(parents=True, exist_ok=True)
        metrics.symlink_to(certs)
    (layout.state / "kueue.kubeconfig").write_text(kubeconfig(layout.pki, "kueue", APISERVER_URL))
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{HEALTH_PORT}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": WEBHOOK_PORT, "host": "127.0.0.1", "certDir": str(certs)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": {"matchLabels": {POD_NAMESPACE_LABEL: "true"}},
        "clientConnection": {"qps": 50, "burst": 100},
        "integrations": {"frameworks": ["pod"], "externalFrameworks": [TRIAL_FRAMEWORK]},
    }
    config_path(layout).write_text(json.dumps(config, indent=2) + "\n")


def argv(layout: Layout) -> list[str]:
    return [str(kueue_dir(layout) / "kueue"), f"--config={config_path(layout)}",
            f"--kubeconfig={layout.state / 'kueue.kubeconfig'}",
            "--feature-gates=VisibilityOnDemand=false", "--zap-log-level=info"]


def _kubectl(layout: Layout, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run([str(layout.binary("kubectl")), f"--kubeconfig={layout.kubeconfig}",
                             *args], input=stdin, capture_output=True, text=True)
    if result.returncode != 0:
        raise KueueError(f"kubectl {' '.join(args[:3])} failed: {result.stderr.strip()[-2000:]}")
    return result.stdout


def _as_json(layout: Layout, path: Path) -> list[dict]:
    text = _kubectl(layout, "create", "--dry-run=client", "-o", "json", "-f", str(path))
    docs, decoder, at = [], json.JSONDecoder(), 0
    while text[at:].strip():  # one JSON document per object, one after the other
        doc, end = decoder.raw_decode(text, at + len(text[at:]) - len(text[at:].lstrip()))
        docs += doc.get("items", []) if doc.get("kind") == "List" else [doc]
        at = end
    return docs


def _apply(layout: Layout, objects: list[dict]) -> None:
    _kubectl(layout, "apply", "--server-side", "--force-conflicts",
             "--field-manager=shipyard-localcluster", "-f", "-",
             stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))


def install_manifests(layout: Layout) -> None:
    """CRDs, namespace and RBAC (idempotent: server-side apply)."""
    config = kueue_dir(layout) / "config"
    _kubectl(layout, "apply", "--server-side", "--force-conflicts",
             "--field-manager=shipyard-localcluster", "-f", str(config / "crds"))
    _kubectl(layout, "wait", "--for=condition=Established", "--timeout=60s", "-f",
             str(config / "crds"))
    role = _as_json(layout, config / "role.yaml")[0]
    role["metadata"]["name"] = "kueue-manager-role"
    secrets = _as_json(layout, config / "secrets-role.yaml")[0]
    secrets["metadata"] = {"name": "kueue-manager-secrets-role", "namespace": NAMESPACE}
    subject = {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}
    _apply(layout, [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE}},
        role,
        _binding("kueue-manager-rolebinding", "kueue-manager-role", subject),
        secrets,
        _binding("kueue-manager-secrets-rolebinding", "kueue-manager-secrets-role", subject,
                 NAMESPACE),
        # What the chart grants Kueue (charts/shipyard/templates/kueue-rbac.yaml).
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "shipyard-kueue-trial-reader"},
         "rules": [{"apiGroups": ["shipyard.dev"], "resources": ["trials"],
                    "verbs": ["get", "list", "watch"]}]},
        _binding("shipyard-kueue-trial-reader", "shipyard-kueue-trial-reader", subject),
    ])


def _binding(name: str, role: str, subject: dict, namespace: str | None = None) -> dict:
    """A ClusterRoleBinding, or a RoleBinding of a Role in `namespace`."""
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding" if namespace else "ClusterRoleBinding", "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                        "kind": "Role" if namespace else "ClusterRole", "name": role},
            "subjects": [subject]}


def webhook_configurations(layout: Layout, docs: list[dict]) -> list[dict]:
    """The module's webhook configurations, reduced to Kueue's own kinds and Pods, called by
    URL on the host with the cluster CA; Pods only in namespaces labelled for Kueue."""
    import base64

    ca = base64.b64encode((layout.pki / "ca.crt").read_bytes()).decode()
    out = []
    for doc in docs:
        kept = []
        for hook in doc.get("webhooks") or []:
            groups = {g for rule in hook.get("rules") or [] for g in rule.get("apiGroups") or []}
            resources = {r for rule in hook.get("rules") or [] for r in rule.get("resources")
                         or []}
            pods = groups == {""} and resources == {"pods"}
            if groups != {"kueue.x-k8s.io"} and not pods:
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{WEBHOOK_PORT}{path}",
                                    "caBundle": ca}
            if pods:
                hook["namespaceSelector"] = {"matchLabels": {POD_NAMESPACE_LABEL: "true"}}
            kept.append(hook)
        doc["webhooks"] = kept
        doc["metadata"] = {"name": "kueue-" + doc["metadata"]["name"]}
        out.append(doc)
    return out


def serving(layout: Layout) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{HEALTH_PORT}/readyz", timeout=2) as r:
            return r.status == 200
    except (OSError, urllib.error.URLError):
        return False


def advertise_accelerators(layout: Layout) -> None:
    """GKE's accelerator labels and the extended resources in the node's status (idempotent;
    a count already there, e.g. set by a test, is left alone)."""
    node = json.loads(_kubectl(layout, "get", "node", NODE_NAME, "-o", "json"))
    have_labels = node["metadata"].get("labels") or {}
    capacity = (node.get("status") or {}).get("capacity") or {}
    for labels, resource, count in ACCELERATORS:
        if resource in capacity:
            continue
        missing = {k: v for k, v in labels.items() if k not in have_labels}
        if missing:
            _kubectl(layout, "label", "node", NODE_NAME, *[f"{k}={v}" for k, v in
                                                           missing.items()])
        escaped = resource.replace("/", "~1")
        patch = [{"op": "add", "path": f"/status/{field}/{escaped}", "value": str(count)}
                 for field in ("capacity", "allocatable")]
        _kubectl(layout, "patch", "node", NODE_NAME, "--subresource=status", "--type=json",
                 "-p", json.dumps(patch))


def ensure(layout: Layout, start: Callable[[Layout, str, list[str], dict], None],
           pids: dict[str, int], alive: Callable[[int], bool]) -> None:
    """Build, install and start Kueue when missing or configured differently; restarts only
    Kueue itself (when its command line or configuration changed)."""
    ensure_binary(layout)
    ensure_certs(layout)
    before = config_path(layout).read_text() if config_path(layout).exists() else None
    write_config(layout)
    install_manifests(layout)
    wanted = argv(layout)
    pid = pids.get("kueue")
    running = pid is not None and alive(pid)
    if running and (_cmdline(pid) != wanted or before != config_path(layout).read_text()):
        from localcluster import stop_pid

        stop_pid(pids.pop("kueue"), 5)
        running = False
    if not running:
        start(layout, "kueue", wanted, pids)
    deadline = time.monotonic() + 120
    while not serving(layout):
        if not alive(pids["kueue"]) or time.monotonic() > deadline:
            from localcluster import log_tail

            raise KueueError(f"kueue did not become ready:\n{log_tail(layout, 'kueue')}")
        time.sleep(0.3)
    webhooks = webhook_configurations(
        layout, _as_json(layout, kueue_dir(layout) / "config" / "webhook.yaml"))
    _apply(layout, webhooks)  # server-side: webhooks filtered out later are dropped
    advertise_accelerators(layout)


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    except OSError:
        return []
