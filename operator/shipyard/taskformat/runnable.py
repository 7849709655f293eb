"""What this operator will do with a task that loads: refuse it (it cannot run here at all) or
run it with a caveat, said before any trial (by `shipyard task lint` and the Task's `Ready`
condition) rather than found out by a wrong reward or a pod that never starts (pure).

- Windows tasks (`[environment] os = "windows"`, a Windows base image): trial pods are Linux
  containers; refused.
- `[environment] type` (not a Harbor task field; some forks use it for VMs or remote hosts):
  Harbor ignores it and runs the image, and so does this operator; what such a task describes
  (nodes, hosts) is not provided. A caveat when the task has an image, else a refusal.
- A prebuilt `docker_image` on a registry that needs credentials: pulled only with an image
  pull secret (the Trial's `spec.pod.imagePullSecrets` or the operator's); a caveat.
- `ADD <url>` of a host that is not on the internet (loopback, link-local and metadata
  addresses, private ranges, `localhost`, cluster or single-label names): the image builder's
  network reaches the outside world only (docs/trust.md), so the build fails; a caveat (a
  platform team may open a private mirror to its builders). Other `ADD <url>` are fine.
- A test script that installs or downloads at trial time (`pip install`, `uvx`, `curl https://`,
  `apt-get install`, …) while the verifier phase has no network (`allow_internet = false`,
  `network_mode = "no-network"`): the fetch fails, in Harbor too, and so do the tests unless what
  they fetch is already in the image; a caveat naming the line.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from shipyard.taskformat.errors import TaskFormatError
from shipyard.taskformat.loader import CONFIG_FILE, LoadedTask
from shipyard.taskformat.models import parse_toml
from shipyard.taskformat.netplan import resolve_network_plan

_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)", re.I | re.M)
_WINDOWS_IMAGE = re.compile(r"(^|/)(windows|nanoserver|servercore)([/:@-]|$)", re.I)
# Registries whose images are private unless made public: a pull needs credentials.
_PRIVATE_REGISTRIES = (
    re.compile(r"^[a-z0-9-]+-docker\.pkg\.dev/"),  # Artifact Registry
    re.compile(r"^\d+\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com/"),  # ECR
    re.compile(r"^[a-z0-9]+\.azurecr\.io/"),  # ACR
    re.compile(r"^nvcr\.io/nvaie/"),  # NGC enterprise
)
HARBOR_TYPES = ("docker",)
_ADD_LINE = re.compile(r"^\s*ADD\s(.*)$", re.I | re.M)
_URL = re.compile(r"""(?:https?|git|ssh)://[^\s"',]+""", re.I)
_INTERNAL_SUFFIXES = (".local", ".internal", ".svc", ".localdomain", ".localhost")


def internal_host(url: str) -> str | None:
    """Why `url`'s host is not on the internet (None: it may be)."""
    try:
        host = (urlsplit(url).hostname or "").rstrip(".").lower()
    except ValueError:
        return None
    if not host:
        return None
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if host == "localhost" or host.endswith(_INTERNAL_SUFFIXES):
            return f"{host} is a local or cluster name"
        if "." not in host:
            return f"{host} is a single-label (cluster or compose) name"
        return None
    if address.is_loopback or address.is_link_local or address.is_unspecified:
        return f"{host} is a loopback or link-local (metadata) address"
    if address.is_private or address in ipaddress.ip_network("100.64.0.0/10"):
        return f"{host} is a private address"
    return None


def _add_caveats(path: str, text: str) -> list[Verdict]:
    found = []
    for line in _ADD_LINE.findall(text):
        for url in _URL.findall(line):
            why = internal_host(url)
            if why:
                found.append(Verdict(path, "ADD", f"{url}: {why}; the image builder fetches "
                                     "ADD sources on a network that reaches the outside world "
                                     "only (not the cluster, its nodes, metadata servers or "
                                     "private ranges), so this build fails", False))
    return found


# A trial-time fetch in a test script: package installs and downloads from the network.
_FETCH = re.compile(
    r"(?<![\w-])(?:(?:(?:pip3?|python3?\s+-m\s+pip|uv\s+pip)\s+install(?![^\n]*--no-index)"
    r"|uv\s+(?:add|sync|tool\s+install)|uvx|apt(?:-get)?\s+(?:-\S+\s+)*install"
    r"|npm\s+(?:install|i|ci)|git\s+clone)(?![\w-])"
    r"|(?:curl|wget)\s[^\n]*\b(?:https?|ftp)://)")


def _offline_fetches(task: LoadedTask) -> list[Verdict]:
    steps: list[str | None] = list(task.step_names()) if task.is_multi_step else [None]
    found: dict[str, Verdict] = {}
    for step in steps:
        try:
            mode = resolve_network_plan(task.config, step).verifier_phase.mode
        except TaskFormatError:
            continue
        if mode != "no-network":
            continue
        dirs = ["tests/"] + ([f"steps/{step}/tests/"] if step else [])
        for path, content in sorted(task.files.items()):
            if not path.endswith(".sh") or not any(path.startswith(d) for d in dirs):
                continue
            for number, line in enumerate(content.decode("utf-8", "replace").splitlines(), 1):
                match = _FETCH.search(line)
                if match is None or line.lstrip().startswith("#") or path in found:
                    continue
                found[path] = Verdict(
                    path, f"line {number}", f"{line.strip()[:120]!r} fetches from the network, "
                    "but the verifier runs with no network (allow_internet = false or "
                    "network_mode = 'no-network', as in Harbor): the fetch fails, and so do the "
                    "tests unless what they fetch is already in the image", False)
    return list(found.values())


@dataclass(frozen=True)
class Verdict:
    file: str
    field: str | None
    message: str
    refused: bool

    def __str__(self) -> str:
        return ": ".join(p for p in (self.file, self.field, self.message) if p)


def _dockerfiles(task: LoadedTask) -> dict[str, str]:
    return {path: content.decode("utf-8", "replace") for path, content in task.files.items()
            if path.rsplit("/", 1)[-1] == "Dockerfile"}


def _extra_type(task: LoadedTask) -> str | None:
    try:
        data = parse_toml(task.files[CONFIG_FILE].decode("utf-8"))
    except (TaskFormatError, UnicodeDecodeError, KeyError):
        return None
    value = (data.get("environment") or {}).get("type")
    return str(value) if value is not None else None


def verdicts(task: LoadedTask, pull_secrets: bool = False) -> list[Verdict]:
    """The task's refusals and caveats; `pull_secrets`: the operator has image pull secrets."""
    env = task.config.environment
    found: list[Verdict] = []
    if env.os == "windows":
        found.append(Verdict(CONFIG_FILE, "environment.os", "'windows': this operator runs "
                             "Linux containers only; a Windows task cannot run here", True))
    for path, text in sorted(_dockerfiles(task).items()):
        for image in _FROM.findall(text):
            if _WINDOWS_IMAGE.search(image.split("@")[0]) and env.os != "windows":
                found.append(Verdict(path, "FROM", f"{image} is a Windows image: this "
                                     "operator runs Linux containers only", True))
        found += _add_caveats(path, text)
    has_image = bool(env.docker_image or "environment/Dockerfile" in task.files)
    compose = any(f.startswith("environment/docker-compose") or f.startswith("environment/compose")
                  for f in task.files)
    if not has_image and not compose and env.os != "windows":
        found.append(Verdict("environment/Dockerfile", None, "missing, and [environment]."
                             "docker_image is not set: there is no image to run (a task written "
                             "for a provider's own environment, e.g. a computer-use sandbox?): "
                             "each Trial must set spec.environment.image, else it fails "
                             "TaskInvalid", False))
    kind = _extra_type(task)
    if kind is not None and kind not in HARBOR_TYPES:
        if has_image:
            found.append(Verdict(CONFIG_FILE, "environment.type", f"{kind!r} is not a Harbor "
                                 "environment: ignored (as Harbor does); the task runs in a "
                                 "pod of its image, and what the type describes (nodes, "
                                 "hosts, VMs) is not provided", False))
        else:
            found.append(Verdict(CONFIG_FILE, "environment.type", f"{kind!r} environments "
                                 "(nodes, hosts, VMs) are not provided by this operator", True))
    found += _offline_fetches(task)
    image = env.docker_image or ""
    if image and not pull_secrets and any(r.match(image) for r in _PRIVATE_REGISTRIES):
        found.append(Verdict(CONFIG_FILE, "environment.docker_image", f"{image} is on a "
                             "private registry: a pull needs credentials (the Trial's "
                             "spec.pod.imagePullSecrets or the operator's "
                             "SHIPYARD_IMAGE_PULL_SECRETS), else the trial fails "
                             "ImagePullFailed", False))
    return found


def refused_message(found: list[Verdict]) -> str | None:
    refused = [str(v) for v in found if v.refused]
    return ("this operator will not run it: " + "; ".join(refused)) if refused else None


def refusal(task: LoadedTask, pull_secrets: bool = False) -> str | None:
    """Why the operator will not run the task (None: it will)."""
    return refused_message(verdicts(task, pull_secrets))
