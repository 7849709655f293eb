"""docker-compose environments: parsing, and what one pod can honour of them (pure).

Harbor runs `environment/docker-compose.yaml` with Docker Compose (the agent works in the service
`main`). Shipyard runs the services as the containers of one trial pod: `main` is the agent's
container, every other service a native sidecar. What one pod cannot honour (a privileged
service, a host PID namespace, two services on one port, …) is refused here, with the file, the
service and the reason, so that the Task's Ready condition, `shipyard task lint` and `push`
refuse it; a compose task is never run without its services.
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from shipyard.taskformat.documents import load_yaml
from shipyard.taskformat.errors import TaskFormatError
from shipyard.taskformat.resolve import step_settings

if TYPE_CHECKING:
    from shipyard.taskformat.loader import LoadedTask

COMPOSE_FILE = "docker-compose.yaml"
ENVIRONMENT_COMPOSE = f"environment/{COMPOSE_FILE}"
MAIN = "main"
_VERIFIER_CONTEXTS = re.compile(r"^(?:tests/|steps/[^/]+/tests/)docker-compose\.yaml$")

LOG_KINDS = {"verifier": "/logs/verifier", "agent": "/logs/agent", "artifacts": "/logs/artifacts"}
TASK_ROOT = "/harbor"
"""What ``${CONTEXT_DIR}/..`` stands for: the task's directory (``${CONTEXT_DIR}`` is its
``environment/``, an absolute path as under Harbor), so a build may take the whole task as its
context."""
HOST_LOGS_ROOT = "/.shipyard-host-logs"
"""What ``${HOST_<KIND>_PATH}`` stands for: a bind from here is the trial's log volume."""
RUNNER_PATHS = ("/shipyard",)
"""Where the trial runner and its state live in `main` (render.pod): no mount of a task there
(nor at `/`, refused for every service)."""
RESERVED_NAMES = ("secrets", "probe")
"""Containers of a trial pod besides `main` (render.pod); `agent-*` are its bundle copies."""
ALLOWED_CAPABILITIES = frozenset({"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID",
                                  "SETUID", "NET_BIND_SERVICE", "SYS_CHROOT"})
"""What a service may add (`cap_add`): the trial pod's own policy (render.pod.MAIN_CAPABILITIES)
less MKNOD, which only `main` holds (plan.compose.SIDECAR_CAPABILITIES)."""

Condition = Literal["service_started", "service_healthy", "service_completed_successfully"]
_CONDITIONS = ("service_started", "service_healthy", "service_completed_successfully")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

# Keys that change nothing in one pod (or that Shipyard does the pod's way), and keys refused.
_IGNORED = frozenset({
    "container_name", "restart", "networks", "labels", "logging", "stdin_open", "tty", "init",
    "ulimits", "stop_grace_period", "stop_signal", "platform", "pull_policy", "hostname",
    "domainname", "links", "external_links", "profiles", "shm_size", "oom_score_adj",
    "mem_swappiness", "memswap_limit", "develop", "attach", "annotations", "x-",
})
_SUPPORTED = frozenset({
    "image", "build", "command", "entrypoint", "environment", "env_file", "working_dir", "user",
    "deploy", "mem_limit", "mem_reservation", "cpus", "depends_on", "healthcheck", "volumes",
    "expose", "ports", "network_mode", "privileged", "cap_add", "cap_drop", "read_only", "tmpfs",
})
_REFUSED = {
    "pid": "a service cannot have its own PID namespace settings in a shared pod",
    "ipc": "the IPC namespace is the pod's",
    "devices": "host devices are not given to trial pods",
    "device_cgroup_rules": "host devices are not given to trial pods",
    "security_opt": "trial pods run under the RuntimeDefault seccomp profile",
    "userns_mode": "user namespaces are the node's",
    "cgroup_parent": "cgroups are the kubelet's",
    "sysctls": "sysctls are not set for trial pods",
    "extends": "'extends' is not supported: inline the service",
    "secrets": "compose secrets are not supported: pass values with environment",
    "configs": "compose configs are not supported: COPY the file into the service's image",
    "scale": "one pod runs one container per service",
    "runtime": "the runtime is the cluster's",
    "isolation": "isolation is the cluster's",
    "volumes_from": "use a named volume shared by both services",
    "gpus": "GPUs go to main through [environment].gpus",
    "extra_hosts": "names resolve to the pod (127.0.0.1) only",
    "dns": "the pod uses the cluster's DNS",
    "dns_search": "the pod uses the cluster's DNS",
    "dns_opt": "the pod uses the cluster's DNS",
    "mac_address": "the pod's network is shared",
    "group_add": "supplementary groups are not supported",
    "storage_opt": "storage is the pod's ephemeral storage",
    "blkio_config": "block I/O limits are not supported",
    "cpu_shares": "use cpus or deploy.resources",
    "cpu_quota": "use cpus or deploy.resources",
    "cpu_period": "use cpus or deploy.resources",
    "cpuset": "use cpus or deploy.resources",
    "cpu_count": "use cpus or deploy.resources",
    "cpu_percent": "use cpus or deploy.resources",
    "cpu_rt_runtime": "real-time scheduling is not supported",
    "cpu_rt_period": "real-time scheduling is not supported",
    "pids_limit": "pid limits are the node's",
    "post_start": "lifecycle hooks are not supported",
    "pre_stop": "lifecycle hooks are not supported",
}
_TOP_REFUSED = {"include": "'include' is not supported: put the services in this file",
                "secrets": "compose secrets are not supported",
                "configs": "compose configs are not supported"}


@dataclass(frozen=True)
class Healthcheck:
    """A service's healthcheck: `command` is an argv run in the service's container."""

    command: tuple[str, ...]
    interval_sec: float = 30.0
    timeout_sec: float = 30.0
    retries: int = 3
    start_period_sec: float = 0.0


@dataclass(frozen=True)
class ServiceBuild:
    context: str  # task-relative directory, e.g. "environment/db/", or "" (the task's own)
    dockerfile: str = "Dockerfile"  # relative to the context


@dataclass(frozen=True)
class VolumeMount:
    kind: Literal["named", "logs", "anonymous", "tmpfs", "task"]
    source: str  # the volume's name, the log kind (verifier/agent/artifacts), a task path, or ""
    target: str
    read_only: bool = False
    files: tuple[str, ...] = ()
    """A bind of the task's own files (`task`): the task-relative paths it holds, each under
    `source` (or `source` itself, a bound file)."""

    @property
    def single_file(self) -> bool:
        return self.files == (self.source,)


MAX_BIND_FILES, MAX_BIND_BYTES = 1000, 700 * 1024
"""The task files one bind mount may hold: they reach the pod in one ConfigMap, which the
apiserver holds to 1 MiB in all (names, and the contents base64-encoded in etcd's copy), each
an item of the pod's volume."""


@dataclass(frozen=True)
class Service:
    name: str
    image: str | None = None
    build: ServiceBuild | None = None
    command: tuple[str, ...] | None = None
    entrypoint: tuple[str, ...] | None = None
    environment: dict[str, str] = field(default_factory=dict)
    working_dir: str | None = None
    user: str | None = None
    cpus: float | None = None
    memory_mb: int | None = None
    cpus_request: float | None = None
    memory_request_mb: int | None = None
    depends_on: dict[str, Condition] = field(default_factory=dict)
    healthcheck: Healthcheck | None = None
    volumes: tuple[VolumeMount, ...] = ()
    ports: tuple[int, ...] = ()
    aliases: tuple[str, ...] = ()
    own_networks: bool = False  # it names `networks:` (Harbor then leaves it out of egress control)
    cap_add: tuple[str, ...] = ()
    read_only: bool = False


@dataclass(frozen=True)
class ComposeEnvironment:
    """The services of `environment/docker-compose.yaml`, `main` first, then in start order
    (every service after those it depends on)."""

    services: tuple[Service, ...]

    @property
    def main(self) -> Service | None:
        return next((s for s in self.services if s.name == MAIN), None)

    @property
    def sidecars(self) -> tuple[Service, ...]:
        return tuple(s for s in self.services if s.name != MAIN)

    def service(self, name: str) -> Service:
        return next(s for s in self.services if s.name == name)


def compose_files(task: LoadedTask) -> list[str]:
    """The task's docker-compose.yaml files, in an environment or verifier context."""
    return sorted(p for p in task.files if p == ENVIRONMENT_COMPOSE or _VERIFIER_CONTEXTS.match(p))


def infra_variables(task: LoadedTask) -> dict[str, str]:
    """The variables Harbor gives a compose file (docker.py / gke.py), as one pod reads them."""
    env = task.config.environment
    variables = {
        "CONTEXT_DIR": f"{TASK_ROOT}/environment",
        "MAIN_IMAGE_NAME": f"hb__{task.short_name}",
        "PREBUILT_IMAGE_NAME": env.docker_image or "",
        "CPUS": "" if env.cpus is None else str(env.cpus),
        "MEMORY": "" if env.memory_mb is None else f"{env.memory_mb}M",
    }
    for kind, path in LOG_KINDS.items():
        variables[f"HOST_{kind.upper()}_LOGS_PATH" if kind != "artifacts"
                  else "HOST_ARTIFACTS_PATH"] = f"{HOST_LOGS_ROOT}/{kind}"
        variables[f"ENV_{kind.upper()}_LOGS_PATH" if kind != "artifacts"
                  else "ENV_ARTIFACTS_PATH"] = path
    return variables


def compose_refusals(task: LoadedTask) -> list[TaskFormatError]:
    """Why this operator cannot run the task's compose environment (empty: it can)."""
    errors = [
        TaskFormatError("a separate verifier's docker-compose environment is not supported: "
                        "give the verifier a Dockerfile or a docker_image", file=path)
        for path in compose_files(task) if path != ENVIRONMENT_COMPOSE
    ]
    if ENVIRONMENT_COMPOSE in task.files:
        try:
            load_compose(task)
        except TaskFormatError as e:
            errors += e.errors
    return errors + _network_refusals(task) + _sidecar_evidence_refusals(task)


def _network_refusals(task: LoadedTask) -> list[TaskFormatError]:
    """Harbor's egress control leaves out a sidecar that names its own `networks:`, so such a
    sidecar reaches out while main cannot; in one trial pod every service has the pod's network
    and its policy, so that cannot be honoured (refused rather than graded as blocked)."""
    mode = task.config.environment.network_mode
    if mode in (None, "public"):
        return []
    try:
        compose = load_compose(task)
    except TaskFormatError:
        return []  # refused on its own
    return [
        _error(f"the service names its own networks, which Harbor leaves outside the egress "
               f"control of network_mode {mode!r}; in one trial pod every service shares the "
               f"pod's network and its policy, so this service cannot reach out alone: drop "
               f"its networks, or set network_mode = \"public\"", f"services.{s.name}.networks")
        for s in (compose.sidecars if compose is not None else ()) if s.own_networks
    ]


def _sidecar_evidence_refusals(task: LoadedTask) -> list[TaskFormatError]:
    """Sidecar artifacts and collect hooks (`service` other than main) are collected from
    their service before the verifier, shared or separate; what cannot be is refused rather
    than graded without its evidence: a service the compose file lacks, a hook with a `user`
    (an exec into a container cannot switch users)."""
    config = task.config
    try:
        compose = load_compose(task)
    except TaskFormatError:
        compose = None  # refused on its own
    services = {s.name for s in compose.services} if compose is not None else set()
    errors = []
    steps: list[str | None] = [s.name for s in config.steps or []] or [None]
    for step in steps:
        settings = step_settings(config, step)
        where = "" if step is None else f"steps.{step}: "
        for artifact in settings.artifacts:
            service = artifact.effective_service
            if service != MAIN and service not in services:
                errors.append(TaskFormatError(
                    f"{where}the artifact {artifact.source!r} is collected from service "
                    f"{service!r}, which {ENVIRONMENT_COMPOSE} does not define",
                    file="task.toml", field="artifacts"))
        for hook in settings.collect:
            if hook.service == MAIN:
                continue
            if hook.service not in services:
                reason = f"service {hook.service!r} is not defined in {ENVIRONMENT_COMPOSE}"
            elif hook.user is not None:
                reason = (f"a collect hook in the sidecar {hook.service!r} runs as that "
                          "container's user: drop 'user'")
            else:
                continue
            errors.append(TaskFormatError(f"{where}{reason}", file="task.toml",
                                          field="verifier.collect"))
    return list({str(e): e for e in errors}.values())


def main_offline(text: bytes, variables: Mapping[str, str]) -> bool:
    """Whether the compose file gives `main` ``network_mode: none`` (unreadable: False, the
    file is refused on its own)."""
    try:
        data = load_yaml(text.decode("utf-8", errors="replace"), ENVIRONMENT_COMPOSE)
        mode = data["services"]["main"]["network_mode"]
        return interpolate(str(mode), variables) == "none"
    except (TypeError, KeyError, TaskFormatError):
        return False


def load_compose(task: LoadedTask, variables: Mapping[str, str] | None = None
                 ) -> ComposeEnvironment | None:
    """The task's compose environment (None without one), or TaskFormatError listing every
    problem. `variables` are extra interpolation values (the task's resolved env)."""
    text = task.files.get(ENVIRONMENT_COMPOSE)
    if text is None:
        return None
    values = {**dict(task.config.environment.env), **(variables or {}), **infra_variables(task)}
    # Harbor merges the task's file over its own base file, whose `main` is built from
    # environment/Dockerfile or runs [environment].docker_image: with either, a task's file
    # may name only its sidecars.
    base_main = "environment/Dockerfile" in task.files or bool(task.config.environment.docker_image)
    return parse_compose(text.decode("utf-8", errors="replace"), values, task.files,
                         base_main=base_main)


def _error(reason: str, field_: str | None = None) -> TaskFormatError:
    return TaskFormatError(reason, file=ENVIRONMENT_COMPOSE, field=field_)


def parse_compose(text: str, variables: Mapping[str, str],
                  task_files: Mapping[str, bytes] | None = None,
                  base_main: bool = False) -> ComposeEnvironment:
    """Parse and validate a compose file (`task_files`: the task's paths, for build contexts
    and env_file; `base_main`: the task's Dockerfile or docker_image is `main` when the file
    does not name it, as Harbor's base file does)."""
    data = load_yaml(text, ENVIRONMENT_COMPOSE)
    if not isinstance(data, dict) or not isinstance(data.get("services"), dict):
        raise _error("a 'services' mapping is required")
    errors: list[TaskFormatError] = []
    for key, reason in _TOP_REFUSED.items():
        if key in data:
            errors.append(_error(reason, key))
    try:
        data = _interpolate(data, variables, "")
    except TaskFormatError as e:
        raise TaskFormatError.combine([*errors, e]) from None
    named = set((data.get("volumes") or {}).keys()) if isinstance(data.get("volumes"),
                                                                   dict) else set()
    services: dict[str, Service] = {}
    refused: set[str] = set()  # already said why: not named again as missing
    files = task_files if task_files is not None else {}
    for name, body in data["services"].items():
        where = f"services.{name}"
        try:
            service = _service(str(name), body or {}, named, files, where)
        except TaskFormatError as e:
            errors += e.errors
            refused.add(str(name))
            continue
        if service is not None:
            services[service.name] = service
    errors += _cross_errors(services, base_main, refused)
    if errors:
        raise TaskFormatError.combine(errors)
    return ComposeEnvironment(_start_order(services))


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BRACED = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])(.*))?$", re.S)


def interpolate(value: str, variables: Mapping[str, str], where: str = "") -> str:
    """Compose's ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, ${VAR:+alt}, $VAR and
    $$ (a literal $), defaults nested; an unset variable is empty, as in Compose."""
    out, i = [], 0
    while i < len(value):
        char = value[i]
        if char != "$" or i + 1 >= len(value):
            out.append(char)
            i += 1
            continue
        nxt = value[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "{":
            depth, j = 1, i + 2
            while j < len(value) and depth:
                depth += {"{": 1, "}": -1}.get(value[j], 0)
                j += 1
            if depth:
                raise _error(f"unterminated interpolation in {value!r}", where or None)
            out.append(_braced(value[i + 2:j - 1], variables, where))
            i = j
        elif match := _NAME.match(value, i + 1):
            out.append(variables.get(match.group(0), ""))
            i = match.end()
        else:
            out.append(char)
            i += 1
    return "".join(out)


def _braced(inner_text: str, variables: Mapping[str, str], where: str) -> str:
    inner = _BRACED.match(inner_text)
    if inner is None:
        raise _error(f"invalid interpolation '${{{inner_text}}}'", where or None)
    name, op, arg = inner.group(1), inner.group(2), inner.group(3) or ""
    present = name in variables
    value = variables.get(name, "")
    if op is None:
        return value
    unset = not present or (op.startswith(":") and value == "")
    if op.endswith("-"):
        return interpolate(arg, variables, where) if unset else value
    if op.endswith("+"):
        return "" if unset else interpolate(arg, variables, where)
    if unset:  # ? and :?
        raise _error(f"required variable {name} is not set: {arg or 'no message'}",
                     where or None)
    return value


def _interpolate(data: Any, variables: Mapping[str, str], where: str) -> Any:
    if isinstance(data, str):
        return interpolate(data, variables, where)
    if isinstance(data, dict):
        return {k: _interpolate(v, variables, f"{where}.{k}" if where else str(k))
                for k, v in data.items()}
    if isinstance(data, list):
        return [_interpolate(v, variables, f"{where}[{i}]") for i, v in enumerate(data)]
    return data


def _argv(value: Any, where: str, shell_string: bool) -> tuple[str, ...]:
    """A command/entrypoint: a list is an argv; a string is split as a shell would (Compose
    splits command strings; we hand them to `sh -c` when they need a shell)."""
    if isinstance(value, list):
        return tuple(str(v) for v in value)
    if isinstance(value, str):
        import shlex

        try:
            return tuple(shlex.split(value)) if not shell_string else ("/bin/sh", "-c", value)
        except ValueError as e:
            raise _error(f"cannot split command: {e}", where) from None
    raise _error("must be a string or a list", where)


def _env_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, dict):
        return {str(k): "" if v is None else _scalar(v) for k, v in value.items()}
    if isinstance(value, list):
        env = {}
        for item in value:
            key, sep, val = str(item).partition("=")
            if sep:  # "KEY" alone takes the host's value in Compose: none here
                env[key] = val
        return env
    raise _error("must be a mapping or a list of KEY=VALUE", where)


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _env_file(text: str) -> dict[str, str]:
    env = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, val = line.removeprefix("export ").partition("=")
        if sep:
            val = val.strip()
            if len(val) >= 2 and val[0] == val[-1] and val[0] in "'\"":
                val = val[1:-1]
            env[key.strip()] = val
    return env


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(us|ms|s|m|h)")
_DURATION_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: Any, where: str) -> float:
    """Compose durations: `1m30s`, `500ms`, `10s`, or a number of seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise _error(f"invalid duration {value!r} (e.g. 10s, 1m30s, 500ms)", where)
    return total


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([bkmg]?)i?b?$", re.I)
_SIZE_FACTORS = {"": 1 / 2**20, "b": 1 / 2**20, "k": 1 / 1024, "m": 1.0, "g": 1024.0}


def parse_memory_mb(value: Any, where: str) -> int:
    """Compose byte sizes (`512m`, `1g`, `1.5GB`, a number of bytes) in whole MiB (at least 1)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return max(1, math.ceil(value / 2**20))
    match = _SIZE.match(str(value).strip())
    if not match:
        raise _error(f"invalid size {value!r} (e.g. 512m, 1g)", where)
    return max(1, math.ceil(float(match.group(1)) * _SIZE_FACTORS[match.group(2).lower()]))


def _cpus(value: Any, where: str) -> float:
    try:
        cpus = float(value)
    except (TypeError, ValueError):
        raise _error(f"invalid cpus {value!r}", where) from None
    if not math.isfinite(cpus) or cpus <= 0:
        raise _error(f"cpus must be a positive number, got {value!r}", where)
    return cpus


def _healthcheck(value: Any, where: str) -> Healthcheck | None:
    if not isinstance(value, dict):
        raise _error("must be a mapping", where)
    if value.get("disable"):
        return None
    test = value.get("test")
    if test is None:
        return None  # Compose would use the image's HEALTHCHECK: the pod cannot read it
    if isinstance(test, str):
        command: tuple[str, ...] = ("/bin/sh", "-c", test)
    elif isinstance(test, list) and test and test[0] == "NONE":
        return None
    elif isinstance(test, list) and len(test) >= 2 and test[0] == "CMD":
        command = tuple(str(t) for t in test[1:])
    elif isinstance(test, list) and len(test) == 2 and test[0] == "CMD-SHELL":
        command = ("/bin/sh", "-c", str(test[1]))
    else:
        raise _error("test must be a string, [\"CMD\", ...], [\"CMD-SHELL\", \"...\"] or "
                     "[\"NONE\"]", f"{where}.test")
    retries = value.get("retries", 3)
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 1:
        raise _error(f"retries must be a positive integer, got {retries!r}", f"{where}.retries")
    check = Healthcheck(
        command=command,
        interval_sec=parse_duration(value.get("interval", "30s"), f"{where}.interval"),
        timeout_sec=parse_duration(value.get("timeout", "30s"), f"{where}.timeout"),
        retries=retries,
        start_period_sec=parse_duration(value.get("start_period", "0s"),
                                        f"{where}.start_period"),
    )
    if check.interval_sec <= 0 or check.timeout_sec <= 0:
        raise _error("interval and timeout must be positive", where)
    return check


def task_path(path: str, where: str, what: str) -> str:
    """A compose path as a task-relative one: relative to environment/ (the project directory)
    or absolute under ``${CONTEXT_DIR}/..``; never outside the task's directory."""
    if "://" in path:
        raise _error(f"{what} {path!r}: a remote {what} is not supported", where)
    if path.startswith("/"):
        absolute = posixpath.normpath(path)
        if absolute != TASK_ROOT and not absolute.startswith(TASK_ROOT + "/"):
            raise _error(f"{what} {path!r} is outside the task's directory (write it relative "
                         "to environment/, or under ${CONTEXT_DIR})", where)
        full = absolute.removeprefix(TASK_ROOT).lstrip("/")
    else:
        full = posixpath.normpath(posixpath.join("environment", path))
    if full == "." or full == "":
        return ""
    if full == ".." or full.startswith("../") or full.startswith("/"):
        raise _error(f"{what} {path!r} is outside the task's directory", where)
    return full


def _build(value: Any, where: str, files: Mapping[str, bytes]) -> ServiceBuild:
    if isinstance(value, str):
        value = {"context": value}
    if not isinstance(value, dict):
        raise _error("must be a context path or a mapping", where)
    for key in value:
        if key not in ("context", "dockerfile"):
            raise _error(f"build.{key} is not supported (one build per context: bake it into "
                         "the Dockerfile)", f"{where}.{key}")
    directory = task_path(str(value.get("context", ".")), where, "build context")
    prefix = f"{directory}/" if directory else ""
    dockerfile = str(value.get("dockerfile", "Dockerfile"))
    # Compose reads a relative dockerfile from the context; ${CONTEXT_DIR}/... is absolute.
    path = (task_path(dockerfile, f"{where}.dockerfile", "dockerfile")
            if dockerfile.startswith("/") else posixpath.normpath(prefix + dockerfile))
    if not path.startswith(prefix):
        raise _error(f"the Dockerfile {path} is outside the build context "
                     f"{directory or 'the task directory'}/", f"{where}.dockerfile")
    if path not in files:
        raise _error(f"{path} not found (the build's Dockerfile)", where)
    return ServiceBuild(context=prefix, dockerfile=path.removeprefix(prefix))


def _task_bind(source: str, target: str, read_only: bool, where: str,
               files: Mapping[str, bytes]) -> VolumeMount:
    """A bind of the task's own files (relative to environment/, or under ${CONTEXT_DIR}/..),
    as Harbor's project directory has them: mounted from a ConfigMap, read-only (a pod has
    no host directory to write back to). A source the task lacks is an empty directory, as
    Docker makes one."""
    path = task_path(source, where, "bind mount")
    if path in files:
        held: tuple[str, ...] = (path,)
    else:
        prefix = f"{path}/" if path else ""
        held = tuple(sorted(f for f in files if f.startswith(prefix)))
    if not held:
        return VolumeMount("anonymous", "", target, read_only)
    if len(held) > MAX_BIND_FILES:
        raise _error(f"bind mount of {source!r}: {len(held):,} task files, more than the "
                     f"{MAX_BIND_FILES:,} a bind of task files can hold (each is an item of the "
                     "pod's volume); COPY them into the service's image (build:)", where)
    size = sum(len(files[f]) for f in held)
    if size > MAX_BIND_BYTES:
        raise _error(f"bind mount of {source!r}: {len(held)} task file(s) of {size:,} bytes, "
                     f"more than the {MAX_BIND_BYTES:,} a bind of task files can hold (it "
                     "reaches the pod as one ConfigMap); COPY them into the service's image "
                     "(build:)", where)
    return VolumeMount("task", path, target, True, held)


def _volume(value: Any, where: str, named: set[str], files: Mapping[str, bytes]
            ) -> VolumeMount:
    if isinstance(value, str):
        parts = value.split(":")
        if len(parts) == 1:
            return VolumeMount("anonymous", "", parts[0])
        source, target = parts[0], parts[1]
        read_only = len(parts) > 2 and "ro" in parts[2].split(",")
        kind = "bind" if source.startswith((".", "/", "~")) else "volume"
    elif isinstance(value, dict):
        kind = str(value.get("type", "volume"))
        source, target = str(value.get("source", "")), str(value.get("target", ""))
        read_only = bool(value.get("read_only"))
        if kind == "tmpfs":
            return VolumeMount("tmpfs", "", target)
    else:
        raise _error("must be a string or a mapping", where)
    if not target.startswith("/"):
        raise _error(f"volume target {target!r} must be an absolute path", where)
    if posixpath.normpath(target) == "/":
        raise _error("a volume cannot be mounted at '/' (Docker refuses it too)", where)
    if kind == "bind":
        if source.startswith(HOST_LOGS_ROOT + "/"):
            return VolumeMount("logs", source.rsplit("/", 1)[1], target, read_only)
        if source.startswith(".") or source == TASK_ROOT or source.startswith(TASK_ROOT + "/"):
            return _task_bind(source, target, read_only, where, files)
        raise _error(f"bind mount of {source!r}: a trial pod has no host directory; COPY the "
                     "files into the service's image (build:) or share a named volume", where)
    if kind != "volume":
        raise _error(f"volume type {kind!r} is not supported", where)
    if not source:
        return VolumeMount("anonymous", "", target, read_only)
    if source not in named:
        raise _error(f"volume {source!r} is not declared under the top-level 'volumes'", where)
    return VolumeMount("named", source, target, read_only)


def _container_port(value: Any, where: str) -> int:
    """The container side of `ports`/`expose` entries: `80`, `8080:80`, `127.0.0.1:8080:80/tcp`,
    `{target: 80}`."""
    if isinstance(value, dict):
        value = value.get("target")
    text = str(value).split("/")[0]
    port = text.rsplit(":", 1)[-1]
    if "-" in port:
        raise _error(f"port ranges ({value!r}) are not supported", where)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise _error(f"invalid port {value!r}", where)
    return int(port)


def _resources(body: dict[str, Any], where: str
               ) -> tuple[float | None, int | None, float | None, int | None]:
    deploy = body.get("deploy") or {}
    if not isinstance(deploy, dict):
        raise _error("must be a mapping", f"{where}.deploy")
    if int(deploy.get("replicas", 1) or 1) != 1:
        raise _error("one pod runs one container per service", f"{where}.deploy.replicas")
    resources = deploy.get("resources") or {}
    limits, reservations = resources.get("limits") or {}, resources.get("reservations") or {}
    if reservations.get("devices") or limits.get("devices"):
        raise _error("devices (GPUs) go to main through [environment].gpus",
                     f"{where}.deploy.resources")
    cpus = limits.get("cpus", body.get("cpus"))
    memory = limits.get("memory", body.get("mem_limit"))
    cpus_req = reservations.get("cpus")
    memory_req = reservations.get("memory", body.get("mem_reservation"))
    return (
        None if cpus in (None, "", 0, "0") else _cpus(cpus, f"{where}.cpus"),
        None if memory in (None, "") else parse_memory_mb(memory, f"{where}.memory"),
        None if cpus_req in (None, "", 0, "0") else _cpus(cpus_req, f"{where}.reservations"),
        None if memory_req in (None, "") else parse_memory_mb(memory_req,
                                                              f"{where}.reservations"),
    )


def _service(name: str, body: Any, named: set[str], files: Mapping[str, bytes], where: str
             ) -> Service | None:
    if not isinstance(body, dict):
        raise _error("must be a mapping", where)
    if body.get("profiles"):
        return None  # not started unless its profile is asked for, which Harbor never does
    errors: list[TaskFormatError] = []
    if name != MAIN and (not _DNS_LABEL.match(name) or len(name) > 63):
        errors.append(_error("a service name must be a DNS label (lowercase letters, digits "
                             "and '-') to be a container of the trial pod", where))
    if name in RESERVED_NAMES or name.startswith("agent-"):
        errors.append(_error(f"the name {name!r} is reserved for the trial pod's own "
                             "container: rename the service", where))
    for key in body:
        if key in _REFUSED:
            errors.append(_error(_REFUSED[key], f"{where}.{key}"))
        elif key not in _SUPPORTED and key not in _IGNORED and not str(key).startswith("x-"):
            errors.append(_error("not supported by Shipyard's one-pod translation",
                                 f"{where}.{key}"))
    if body.get("privileged"):
        errors.append(_error("privileged containers are not run", f"{where}.privileged"))
    mode = body.get("network_mode")
    # main's `none` is the trial's no-network baseline (loader.offline_main_baseline).
    if mode not in (None, "bridge", "default") and not (name == MAIN and mode == "none"):
        errors.append(_error(f"network_mode {mode!r}: all services share the trial pod's "
                             "network (its mode is [environment].network_mode)",
                             f"{where}.network_mode"))
    caps = tuple(str(c).upper().removeprefix("CAP_") for c in body.get("cap_add") or ())
    beyond = sorted(set(caps) - ALLOWED_CAPABILITIES)
    if beyond:
        errors.append(_error(f"capabilities beyond the trial pod's policy: {', '.join(beyond)} "
                             f"(allowed: {', '.join(sorted(ALLOWED_CAPABILITIES))})",
                             f"{where}.cap_add"))
    if errors:
        raise TaskFormatError.combine(errors)
    build = _build(body["build"], f"{where}.build", files) if "build" in body else None
    image = body.get("image")
    if name != MAIN and build is None and not image:
        raise _error("a service needs an image or a build", where)
    environment = {}
    env_files = body.get("env_file") or []
    for item in [env_files] if isinstance(env_files, str | dict) else env_files:
        path = item.get("path") if isinstance(item, dict) else item
        required = item.get("required", True) if isinstance(item, dict) else True
        relative = task_path(str(path), f"{where}.env_file", "env_file")
        if relative not in files:
            if required:
                raise _error(f"env_file {path!r} not found in the task",
                             f"{where}.env_file")
            continue
        environment.update(_env_file(files[relative].decode("utf-8", errors="replace")))
    environment.update(_env_map(body.get("environment"), f"{where}.environment"))
    depends: dict[str, Condition] = {}
    raw_depends = body.get("depends_on") or {}
    if isinstance(raw_depends, list):
        raw_depends = {d: {"condition": "service_started"} for d in raw_depends}
    for other, spec in raw_depends.items():
        condition = (spec or {}).get("condition", "service_started")
        if condition not in _CONDITIONS:
            raise _error(f"unknown condition {condition!r}", f"{where}.depends_on.{other}")
        depends[str(other)] = condition
    volumes = tuple(_volume(v, f"{where}.volumes[{i}]", named, files)
                    for i, v in enumerate(body.get("volumes") or []))
    tmpfs = body.get("tmpfs") or []
    volumes += tuple(VolumeMount("tmpfs", "", str(t).split(":")[0])
                     for t in ([tmpfs] if isinstance(tmpfs, str) else tmpfs))
    if name == MAIN:
        for i, volume in enumerate(volumes):
            target = posixpath.normpath(volume.target)
            if any(target == p or target.startswith(p + "/") for p in RUNNER_PATHS):
                raise _error(f"volume target {volume.target!r} is the trial runner's, which "
                             "no task may mount over", f"{where}.volumes[{i}]")
    ports = tuple(_container_port(p, f"{where}.ports") for p in body.get("ports") or [])
    ports += tuple(_container_port(p, f"{where}.expose") for p in body.get("expose") or [])
    aliases = [str(body["hostname"])] if body.get("hostname") else []
    networks = body.get("networks")
    if isinstance(networks, dict):
        for net in networks.values():
            aliases += [str(a) for a in (net or {}).get("aliases") or []]
    cpus, memory, cpus_req, memory_req = _resources(body, where)
    healthcheck = (_healthcheck(body["healthcheck"], f"{where}.healthcheck")
                   if body.get("healthcheck") is not None else None)
    user = body.get("user")
    if user not in (None, "") and not re.match(r"^\d+(:\d+)?$", str(user)):
        raise _error(f"user {user!r}: a pod runs a container as a numeric uid[:gid]; give "
                     "the user's numbers, or set USER in the service's image", f"{where}.user")
    return Service(
        name=name,
        image=str(image) if image else None,
        build=build,
        command=_argv(body["command"], f"{where}.command", False)
        if body.get("command") is not None else None,
        entrypoint=_argv(body["entrypoint"], f"{where}.entrypoint", False)
        if body.get("entrypoint") is not None else None,
        environment=environment,
        working_dir=str(body["working_dir"]) if body.get("working_dir") else None,
        user=None if user in (None, "") else str(user),
        cpus=cpus, memory_mb=memory, cpus_request=cpus_req, memory_request_mb=memory_req,
        depends_on=depends,
        healthcheck=healthcheck,
        volumes=volumes,
        ports=tuple(dict.fromkeys(ports)),
        aliases=tuple(dict.fromkeys(aliases)),
        own_networks=bool(networks),
        cap_add=caps,
        read_only=bool(body.get("read_only")),
    )


def _cross_errors(services: dict[str, Service], base_main: bool, refused: set[str]
                  ) -> list[TaskFormatError]:
    """What is wrong between the services; `refused`: services whose own errors are said."""
    errors = []
    if MAIN not in services and MAIN not in refused and not base_main:
        errors.append(_error("the agent's service 'main' is missing, and there is no "
                             "environment/Dockerfile or [environment].docker_image to be it",
                             "services"))
    owners: dict[int, str] = {}
    for service in services.values():
        for port in service.ports:
            if port in owners and owners[port] != service.name:
                errors.append(_error(
                    f"port {port} is used by services {owners[port]!r} and {service.name!r}: "
                    "services share the trial pod's network, so two cannot listen on one port",
                    f"services.{service.name}.ports"))
            owners.setdefault(port, service.name)
        for other, condition in service.depends_on.items():
            if other in refused:
                continue
            if other not in services:
                errors.append(_error(f"depends on undefined service {other!r}",
                                     f"services.{service.name}.depends_on"))
            elif other == MAIN and service.name != MAIN:
                errors.append(_error("a service cannot depend on 'main': the sidecars start "
                                     "before the agent's container",
                                     f"services.{service.name}.depends_on"))
            elif (condition == "service_healthy" and services[other].healthcheck is None):
                errors.append(_error(f"depends on {other!r} being healthy, but {other!r} has "
                                     "no healthcheck test", f"services.{service.name}."
                                     "depends_on"))
    names = {s.name for s in services.values()}
    for service in services.values():
        for alias in service.aliases:
            if alias in names and alias != service.name:
                errors.append(_error(f"alias {alias!r} is another service's name",
                                     f"services.{service.name}"))
    if not errors:
        try:
            _start_order(services)
        except TaskFormatError as e:
            errors.append(e)
    return errors


def _start_order(services: dict[str, Service]) -> tuple[Service, ...]:
    """`main`, then the sidecars so that each starts after what it depends on (stable: the
    file's order otherwise); a cycle is refused."""
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(name: str, chain: tuple[str, ...]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            raise _error(f"depends_on cycle: {' -> '.join((*chain, name))}", "services")
        state[name] = 1
        for other in services[name].depends_on:
            if other in services and other != MAIN:
                visit(other, (*chain, name))
        state[name] = 2
        order.append(name)

    for name in services:
        if name != MAIN:
            visit(name, ())
    main = [services[MAIN]] if MAIN in services else []
    return (*main, *(services[n] for n in order))
