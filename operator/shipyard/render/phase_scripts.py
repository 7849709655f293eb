"""The shell each phase runs in its pod: the root `prepare` script (files into place) and the
`command` run as the phase's user, from what the plan says the phase does
(`shipyard.plan.phases` script intents). Harbor's own shell steps are mirrored here.

Shipyard's own steps (files into place, collect hooks, the artifacts packed) are also given as
runner steps (`prepare_ops`, `command_ops`: docs/runner-protocol.md, "Steps"), which the Go
runner does itself instead of the shell, with no program of the task's image (which the agent
may have replaced); runner.sh runs the shell. Both say the same."""

from __future__ import annotations

import base64
import json
import math
import shlex
from dataclasses import dataclass, replace
from typing import Any

from shipyard.plan.network import FENCE_MARK, Fence
from shipyard.plan.phases import (
    AGENT_LOGS,
    ARTIFACTS_TAR,
    INSTRUCTION_PATH,
    LOG_DIRS,
    REWARD_JSON,
    REWARD_TXT,
    TEST_STDOUT,
    CollectScript,
    CommandAgentScript,
    EnvironmentScript,
    HealthcheckScript,
    InstalledAgentScript,
    OracleScript,
    PhaseSpec,
    SetupScript,
    VerifierEnvironmentScript,
    VerifyScript,
)
from shipyard.render.agent_scripts import agent_script, install_script
from shipyard.taskformat import ArtifactConfig, HealthcheckConfig, VerifierCollectConfig

PAYLOAD = '"$SHIPYARD_PAYLOAD"'
ARTIFACTS_STAGE = "/shipyard/state/artifacts-stage"
ARTIFACTS_TREE = f"{PAYLOAD}/artifacts-tree"
"""Where a separate verifier's setup extracts the operator's clean artifacts tar (inside its
own phase folder) before copying each artifact to its path."""


Op = dict[str, Any]
"""One runner step (`runner/ops.go`): {"op": NAME, ...}."""
PAYLOAD_OP = "$SHIPYARD_PAYLOAD"  # the runner puts the phase's payload folder here


@dataclass(frozen=True)
class PhaseScripts:
    command: str
    prepare: str | None = None
    prepare_ops: tuple[Op, ...] | None = None
    """The prepare as runner steps (None: the Go runner runs `prepare` with the image's sh)."""
    command_ops: tuple[Op, ...] | None = None
    """The command as runner steps (Shipyard's own command: the collect phase)."""


def phase_scripts(phase: PhaseSpec) -> PhaseScripts:
    """The phase's scripts: rendered from its intent, or the plain shell it was given; its
    fence before anything else."""
    scripts = _scripts(phase)
    if phase.fence is None:
        return scripts
    return replace(scripts, prepare=_fence_prepare(phase.fence, phase.id)
                   + (scripts.prepare or ""),
                   prepare_ops=None if scripts.prepare_ops is None
                   else _fence_ops(phase.fence) + scripts.prepare_ops)


def _scripts(phase: PhaseSpec) -> PhaseScripts:
    match phase.script:
        case None:
            return PhaseScripts(phase.command, phase.prepare)
        case EnvironmentScript(workdir=workdir, copy_environment=copy):
            return PhaseScripts("true", _environment_prepare(workdir, copy),
                                _environment_ops(workdir, copy))
        case HealthcheckScript(check=check):
            return PhaseScripts(healthcheck_script(check),
                                command_ops=(_healthcheck_op(check, phase.user),))
        case SetupScript():
            return _setup(phase.script)
        case OracleScript(script=script):
            return _oracle(script)
        case CommandAgentScript(command=command):
            return _command_agent(command)
        case InstalledAgentScript(run=run):
            install = install_script(run)
            ops = _instruction_ops() + ((_op("sh", command=install),) if install else ())
            return PhaseScripts(agent_script(run, INSTRUCTION_PATH),
                                _instruction_prepare() + install, ops)
        case CollectScript(hooks=hooks, artifacts=artifacts):
            return PhaseScripts(_collect_command(hooks, artifacts),
                                command_ops=_collect_ops(hooks, artifacts))
        case VerifierEnvironmentScript(artifacts=artifacts):
            return PhaseScripts("true", _dirs_prepare() + _materialize(artifacts),
                                _dirs_ops() + _materialize_ops(artifacts))
        case VerifyScript():
            return _verify(phase.script)
    raise TypeError(f"no script for {phase.script!r}")


def _op(name: str, **fields: Any) -> Op:
    return {"op": name, **{k: v for k, v in fields.items() if v not in (None, "", [], ())}}


def fence_message(fence: Fence, not_run: str = "Nothing of the phase ran.",
                  seconds: int | None = None) -> str:
    """Why a fence failed ("{}" the address still reached), and what did not run."""
    return (f"{FENCE_MARK} after {seconds or fence_seconds(fence)} s: the pod still reached "
            f"{fence.target} at {{}}, which the phase's policy blocks. Does the cluster's CNI "
            "enforce NetworkPolicy, and does no other policy of the namespace let trial pods "
            f"out? {not_run} (SHIPYARD_NETWORK_FENCE_SEC=0 turns this check "
            "off: trials then run open where policies are not enforced.)")


def fence_seconds(fence: Fence) -> int:
    return _seconds(fence.timeout_sec)


START_FENCE_MIN_SEC = 60


def start_fence_seconds(fence: Fence) -> int:
    """A pod start's fence (`render.pod.fence_start`) waits longer than a phase's: it starts
    with the pod, when the CNI has yet to program the pod's policy, and a node starting many
    pods at once programmed some more than 10 s late. A CNI that never enforces policy is
    still told within the phase's time, by the first phase's own fence."""
    return max(START_FENCE_MIN_SEC, 2 * fence_seconds(fence))


def _seconds(value: float) -> int:
    return max(1, math.ceil(value))


def _fence_ops(fence: Fence) -> tuple[Op, ...]:
    """The runner connects to the apiserver until it is refused or unanswered (the pod's
    policy in force), then the phase goes on; after the fence's time the phase fails with
    `fence_message` ("{}" the address still reached)."""
    return (_op("fence", addrs=list(fence.sockets), timeout=_seconds(fence.timeout_sec),
                command=fence_message(fence)),)


def _fence_prepare(fence: Fence, phase_id: str) -> str:
    """runner.sh's fence: the same with the image's bash (`/dev/tcp`) and `timeout`; without
    them every connect fails and the fence passes (runner.sh trusts the image)."""
    sockets = " ".join(shlex.quote(s) for s in fence.sockets)
    message = shlex.quote(f"shipyard runner: preparing phase {phase_id} failed: fence "
                          + fence_message(fence).replace("{}", "%s"))
    return ("tries=0\n"
            "while :; do\n"
            "  open=\n"
            f"  for a in {sockets}; do\n"
            "    h=${a%:*}; h=${h#[}; h=${h%]}\n"
            "    if timeout 1 bash -c \"exec 3<>/dev/tcp/$h/${a##*:}\" 2>/dev/null; then "
            "open=$a; break; fi\n"
            "  done\n"
            "  [ -z \"$open\" ] && break\n"
            f"  if [ $tries -ge {10 * _seconds(fence.timeout_sec)} ]; then "
            f"printf {message}'\\n' \"$open\"; exit 1; fi\n"
            "  tries=$((tries + 1)); sleep 0.1\n"
            "done\n")


def _dirs_ops() -> tuple[Op, ...]:
    return (_op("mkdir", paths=list(LOG_DIRS), mode="1777"),)


def _dirs_prepare() -> str:
    """Harbor's ensure_dirs; world-writable as there, and sticky: a process of one user
    cannot remove, rename or plant a link over another's file (the kernel's
    protected_symlinks then keeps root's redirects from following a link planted there)."""
    dirs = " ".join(LOG_DIRS)
    return f"mkdir -p {dirs} && chmod 1777 {dirs}\n"


def _materialize(artifacts: tuple[str, ...]) -> str:
    """A separate verifier's artifacts: the operator's clean tar (regular files and folders
    under the declared paths only, `shipyard.render.artifact_bundle`) extracted in the phase's
    own folder, then each artifact copied to its own path (a folder merged into what the
    image has there, as Harbor's upload does). Nothing is extracted at `/`."""
    if not artifacts:
        return ""
    tree, tar = ARTIFACTS_TREE, f"{PAYLOAD}/artifacts.tar"
    lines = [f"if [ -s {tar} ]; then\n",
             f"mkdir -p {tree} && tar -x -f {tar} -C {tree} --no-same-owner\n"]
    for source in dict.fromkeys(artifacts):
        rel = _artifact_rel(source)
        if not rel:
            continue
        src, dst = f'{tree}/{shlex.quote(rel)}', shlex.quote("/" + rel)
        parent = shlex.quote("/" + rel.rpartition("/")[0])
        lines.append(
            f"if [ -d {src} ]; then mkdir -p {dst} && cp -a {src}/. {dst}/\n"
            f"elif [ -f {src} ]; then mkdir -p {parent} && rm -rf {dst} && cp -a {src} {dst}\n"
            "fi\n")
    lines.append("fi\n")
    return "".join(lines)


def _artifact_rel(source: str) -> str:
    return "/".join(p for p in source.strip("/").split("/") if p not in ("", "."))


def _materialize_ops(artifacts: tuple[str, ...]) -> tuple[Op, ...]:
    if not artifacts:
        return ()
    tree = f"{PAYLOAD_OP}/artifacts-tree"
    ops = [_op("untar", src=f"{PAYLOAD_OP}/artifacts.tar", dst=tree)]
    for rel in dict.fromkeys(_artifact_rel(a) for a in artifacts):
        if rel:
            ops.append(_op("copy", src=f"{tree}/{rel}", dst=f"/{rel}", optional=True))
    return tuple(ops)


def _environment_ops(workdir: str | None, copy_environment: bool) -> tuple[Op, ...]:
    ops = _dirs_ops()
    if copy_environment:
        ops += (_op("copy", src=f"{PAYLOAD_OP}/environment", dst=workdir or "."),)
    return ops


def _environment_prepare(workdir: str | None, copy_environment: bool) -> str:
    """Harbor's ensure_dirs, plus the environment/ files for a prebuilt image (docs/harbor.md §b.3
    2.2)."""
    prepare = _dirs_prepare()
    if copy_environment:
        target = shlex.quote(workdir) if workdir else '"$(pwd)"'
        prepare += f"mkdir -p {target} && cp -a {PAYLOAD}/environment/. {target}/\n"
    return prepare


def _healthcheck_op(check: HealthcheckConfig, user: str | None) -> Op:
    return _op("healthcheck", command=check.command, timeout=int(check.timeout_sec), user=user,
               start_period=check.start_period_sec, start_interval=check.start_interval_sec,
               interval=check.interval_sec, retries=check.retries)


def healthcheck_script(check: HealthcheckConfig) -> str:
    """Harbor's healthcheck loop (`environments/base.py:1560-1612`), run inside the pod."""
    return f"""start=$(date +%s)
failures=0
while :; do
  if timeout {int(check.timeout_sec)} sh -c {shlex.quote(check.command)}; then exit 0; fi
  if [ $(( $(date +%s) - start )) -lt {int(check.start_period_sec)} ]; then
    sleep {check.start_interval_sec}
    continue
  fi
  failures=$((failures + 1))
  if [ "$failures" -ge {check.retries} ]; then
    echo {shlex.quote(f"Healthcheck failed after {check.retries} consecutive retries: "
                      f"{check.command}")} >&2
    exit 1
  fi
  sleep {check.interval_sec}
done
"""


def _setup(intent: SetupScript) -> PhaseScripts:
    """Harbor's `_prepare_step`: reset /logs/agent (and the shared verifier's leftovers),
    upload the step's workdir/ into the working directory, run its setup.sh there."""
    prepare = "rm -rf /logs/agent && mkdir -p /logs/agent && chmod 1777 /logs/agent\n"
    if intent.previous_shared:
        prepare += ("rm -rf /logs/verifier /tests && mkdir -p /logs/verifier "
                    "&& chmod 1777 /logs/verifier\n")
    if intent.files:
        prepare += f'cp -a {PAYLOAD}/workdir/. "$(pwd)"/\n'
        if intent.user is not None:
            names = " ".join(shlex.quote(n.split("/")[0]) for n in intent.files)
            prepare += f"(cd \"$(pwd)\" && chown -R {shlex.quote(intent.user)} {names}) || true\n"
    command = ("if [ -f setup.sh ]; then bash ./setup.sh; fi\n" if "setup.sh" in intent.files
               else "true\n")
    return PhaseScripts(command, prepare, _setup_ops(intent))


def _setup_ops(intent: SetupScript) -> tuple[Op, ...]:
    ops = [_op("rm", paths=["/logs/agent"]), _op("mkdir", paths=["/logs/agent"], mode="1777")]
    if intent.previous_shared:
        ops += [_op("rm", paths=["/logs/verifier", "/tests"]),
                _op("mkdir", paths=["/logs/verifier"], mode="1777")]
    if intent.files:
        ops.append(_op("copy", src=f"{PAYLOAD_OP}/workdir", dst="."))
        if intent.user is not None:
            ops.append(_op("chown", user=intent.user,
                           paths=list(dict.fromkeys(n.split("/")[0] for n in intent.files))))
    return tuple(ops)


def _executable(path: str) -> str:
    """` && chmod +x PATH`, unless the bundle already made it executable (`*.sh`)."""
    return "" if path.endswith(".sh") else f" && chmod +x {shlex.quote(path)}"


def _executable_ops(path: str) -> tuple[Op, ...]:
    return () if path.endswith(".sh") else (_op("chmod", mode="+x", paths=[path]),)


def _oracle(script: str) -> PhaseScripts:
    # Each program a prepare runs costs the pod a fork and exec: as few as it takes.
    prepare = (f"rm -rf /solution && cp -a {PAYLOAD}/solution /solution"
               f"{_executable('/solution/' + script)}\n")
    log = AGENT_LOGS["oracle"]
    command = (
        f"(/solution/{shlex.quote(script)}) > {log} 2>&1\n"
        "rc=$?\n"
        'if [ "$rc" -ne 0 ]; then echo "$rc" > /logs/agent/exit-code.txt; fi\n'
        'exit "$rc"\n'
    )
    ops = (_op("rm", paths=["/solution"]),
           _op("copy", src=f"{PAYLOAD_OP}/solution", dst="/solution"),
           *_executable_ops(f"/solution/{script}"))
    return PhaseScripts(command, prepare, ops)


def _instruction_prepare() -> str:
    """The instruction into the file agents read it from (never a command line)."""
    return f"cp {PAYLOAD}/instruction.md {INSTRUCTION_PATH} && chmod 644 {INSTRUCTION_PATH}\n"


def _instruction_ops() -> tuple[Op, ...]:
    return (_op("copy", src=f"{PAYLOAD_OP}/instruction.md", dst=INSTRUCTION_PATH),
            _op("chmod", mode="644", paths=[INSTRUCTION_PATH]))


def _command_agent(agent_command: str) -> PhaseScripts:
    prepare = _instruction_prepare()
    command = (
        f'SHIPYARD_INSTRUCTION="$(cat {INSTRUCTION_PATH})"\n'
        "export SHIPYARD_INSTRUCTION\n"
        f"({agent_command}\n) > {AGENT_LOGS['command']} 2>&1\n"
    )
    return PhaseScripts(command, prepare, _instruction_ops())


def _stage_artifact(artifact: ArtifactConfig) -> str:
    """Shell that copies one artifact into the stage at its own path. A directory is packed
    from inside (`-C DIR .`) with its `exclude` patterns, exactly as Harbor's `tar --exclude`."""
    rel = artifact.source.strip("/")
    parent, _, name = rel.rpartition("/")
    excludes = "".join(f" --exclude={shlex.quote(x)}" for x in artifact.exclude)
    src, stage = shlex.quote("/" + rel), shlex.quote(f"{ARTIFACTS_STAGE}/{rel}")
    stage_parent = shlex.quote(f"{ARTIFACTS_STAGE}/{parent}")
    listed = f" && echo {shlex.quote(rel)} >> {ARTIFACTS_TAR}.list"
    return (
        # A link anywhere on the path (say, the agent's /app/out -> /root) is not followed.
        f'if [ -e {src} ] && [ "$(readlink -f {src})" != {src} ]; then '
        f"echo {shlex.quote(f'artifact /{rel}: a link on its path, not collected')} >&2\n"
        f"elif [ -d {src} ]; then mkdir -p {stage} && tar -c -f - -C {src}{excludes} . "
        f"| tar -x -f - -C {stage}{listed}\n"
        f"elif [ -e {src} ]; then mkdir -p {stage_parent} && tar -c -f - -C "
        f"{shlex.quote('/' + parent)} {shlex.quote(name)} | tar -x -f - -C {stage_parent}{listed}"
        "\nfi\n"
    )


def _collect_command(hooks: tuple[VerifierCollectConfig, ...],
                     artifacts: tuple[ArtifactConfig, ...]) -> str:
    """Before a separate verifier: collect hooks, then the artifacts packed for the verifier
    pod (best effort, as Harbor's collection never fails a trial)."""
    return "".join(_collect_hook(h) for h in hooks) + _pack_artifacts(artifacts) + "exit 0\n"


def _pack_artifacts(artifacts: tuple[ArtifactConfig, ...]) -> str:
    """The artifacts packed (as root) into the runner's root-only folder, where the operator
    reads them (bounded) and keeps only regular files and folders (`render.artifact_bundle`).
    Best effort: a failure leaves what was packed, never fails the phase."""
    pack = f"rm -rf {ARTIFACTS_STAGE} {ARTIFACTS_TAR} && mkdir -p {ARTIFACTS_STAGE}\n"
    pack += f": > {ARTIFACTS_TAR}.list\n"
    pack += "".join(_stage_artifact(a) for a in artifacts)
    # The staged entries named as arguments (busybox's tar has no -T), each as ./<path>; none
    # packed: an empty file (the operator reads no artifacts from it).
    pack += (
        "set --\n"
        f'while IFS= read -r e; do set -- "$@" "./$e"; done < {ARTIFACTS_TAR}.list\n'
        f'if [ $# -gt 0 ]; then tar -c -f {ARTIFACTS_TAR} -C {ARTIFACTS_STAGE} "$@"; '
        f"else : > {ARTIFACTS_TAR}; fi\n"
        f"rm -rf {ARTIFACTS_STAGE} {ARTIFACTS_TAR}.list\n"
    )
    return pack


def _collect_ops(hooks: tuple[VerifierCollectConfig, ...],
                 artifacts: tuple[ArtifactConfig, ...]) -> tuple[Op, ...]:
    return (*_hook_ops(hooks), _pack_op(artifacts))


def _pack_items(artifacts: tuple[ArtifactConfig, ...]) -> list[dict[str, Any]]:
    return [{"source": a.source, **({"exclude": list(a.exclude)} if a.exclude else {})}
            for a in artifacts]


def _pack_op(artifacts: tuple[ArtifactConfig, ...]) -> Op:
    return _op("pack", dst=ARTIFACTS_TAR, items=_pack_items(artifacts))


def recovery_items(artifacts: tuple[ArtifactConfig, ...]) -> str:
    """The Go runner's `artifacts LIMIT ITEMS` argument: what it packs as the pack step would
    when nothing was packed (a trial that ended before its verification)."""
    text = json.dumps(_pack_items(artifacts), separators=(",", ":"))
    return base64.b64encode(text.encode()).decode()


def _hook_ops(hooks: tuple[VerifierCollectConfig, ...]) -> tuple[Op, ...]:
    return tuple(_op("hook", command=h.command, timeout=int(h.timeout_sec),
                     user=None if h.user is None else str(h.user)) for h in hooks)


def _verify_ops(intent: VerifyScript) -> tuple[Op, ...]:
    test = f"/tests/{intent.test_script}"
    stale = [REWARD_TXT, REWARD_JSON, TEST_STDOUT, "/solution"]
    first = (*_hook_ops(intent.hooks), *((_pack_op(intent.artifacts),) if intent.artifacts
                                         else ()))
    if intent.upload_tests:
        return (*first, _op("rm", paths=[*stale, "/tests"]),
                _op("copy", src=f"{PAYLOAD_OP}/tests", dst="/tests"), *_executable_ops(test))
    return (*first, _op("rm", paths=stale), _op("chmod", mode="+x", paths=[test]))


def _verify(intent: VerifyScript) -> PhaseScripts:
    """Stale rewards removed, tests uploaded now (unless bundled in a verifier image), the
    test script run; for a shared verifier the collect hooks run first (best effort), then its
    artifacts are packed, as Harbor collects them before verification."""
    prepare = "".join(_collect_hook(h) for h in intent.hooks)
    if intent.artifacts:
        prepare += f"(\n{_pack_artifacts(intent.artifacts)}) || true\n"
    # Stale rewards, the oracle's files (for its agent phase only), the tests to be replaced.
    # test-stdout.txt too: whatever an agent planted there (a link) is gone before the
    # command's redirect, as root, opens it.
    prepare += f"rm -rf -- {REWARD_TXT} {REWARD_JSON} {TEST_STDOUT} /solution"
    test = f"/tests/{intent.test_script}"
    if intent.upload_tests:
        prepare += f" /tests\ncp -a {PAYLOAD}/tests /tests{_executable(test)}\n"
    else:
        prepare += f"\nchmod +x {shlex.quote(test)}\n"
    command = f"(/tests/{shlex.quote(intent.test_script)}) > {TEST_STDOUT} 2>&1\n"
    return PhaseScripts(command, prepare, _verify_ops(intent))


def _collect_hook(hook: VerifierCollectConfig) -> str:
    run = f"timeout {int(hook.timeout_sec)} bash -lc {shlex.quote(hook.command)}"
    if hook.user is not None:
        run = f"su -s /bin/sh {shlex.quote(str(hook.user))} -c {shlex.quote(run)}"
    return f"{run} || echo 'collect hook failed (ignored)' >&2\n"
