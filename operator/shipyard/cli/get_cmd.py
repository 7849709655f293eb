"""`shipyard get`, `shipyard logs` and `shipyard results`."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import yaml

from shipyard.api.conventions import (
    LABEL_SWEEP,
    is_finished_phase,
    selector_string,
    sweep_selector,
)
from shipyard.cli.common import NAMESPACE_OPTION, fail, namespace_or_default
from shipyard.cli.formatting import (
    TASK_COLUMNS,
    TRIAL_COLUMNS,
    duration,
    number,
    table,
    task_row,
    trial_reason,
    trial_row,
)
from shipyard.cli.harbor_artifacts import TrialArtifacts, harbor_artifacts
from shipyard.cli.harbor_results import job_result, trial_files
from shipyard.cli.sweep_view import SWEEP_COLUMNS, sweep_row

KINDS = {"tasks": "tasks", "task": "tasks", "trials": "trials", "trial": "trials",
         "sweeps": "sweeps", "sweep": "sweeps"}
ALL_NAMESPACES = click.option("--all-namespaces", "-A", is_flag=True,
                              help="Every namespace.")
SELECTOR = click.option("--selector", "-l", default=None, help="Label selector.")


def _scope(namespace: str | None, all_namespaces: bool) -> str | None:
    return None if all_namespaces else namespace_or_default(namespace)


def _by_creation(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(objs, key=lambda o: (o["metadata"].get("namespace", ""),
                                       o["metadata"].get("creationTimestamp", ""),
                                       o["metadata"]["name"]))


@click.command("get")
@click.argument("kind", required=False, default="trials",
                type=click.Choice(sorted(KINDS)))
@click.argument("names", nargs=-1)
@NAMESPACE_OPTION
@ALL_NAMESPACES
@SELECTOR
@click.option("--output", "-o", type=click.Choice(["table", "json", "yaml"]), default="table")
def get_cmd(kind: str, names: tuple[str, ...], namespace: str | None, all_namespaces: bool,
            selector: str | None, output: str) -> None:
    """List tasks, trials (the default) or sweeps as a table."""
    from shipyard.kube.trials import list_objects

    plural = KINDS[kind]
    scope = _scope(namespace, all_namespaces)
    objs = _by_creation(list_objects(plural, scope, selector))
    if names:
        wanted = set(names)
        objs = [o for o in objs if o["metadata"]["name"] in wanted]
        missing = wanted - {o["metadata"]["name"] for o in objs}
        if missing:
            fail(f"{plural} not found in {scope or 'any namespace'}: "
                 f"{', '.join(sorted(missing))}")
    if output == "json":
        click.echo(json.dumps(objs, indent=2))
        return
    if output == "yaml":
        click.echo(yaml.safe_dump_all(objs, sort_keys=False), nl=False)
        return
    if not objs:
        click.echo(f"No {plural} found in {scope or 'any namespace'}.", err=True)
        return
    now = datetime.now(UTC)
    row, columns = {"trials": (trial_row, TRIAL_COLUMNS), "tasks": (task_row, TASK_COLUMNS),
                    "sweeps": (sweep_row, SWEEP_COLUMNS)}[plural]
    wide = scope is None
    click.echo(table((["NAMESPACE"] if wide else []) + columns,
                     [row(o, now, namespace=wide) for o in objs]))


# ---------------------------------------------------------------- cancel


@click.command("cancel")
@click.argument("trials", nargs=-1, required=True)
@NAMESPACE_OPTION
def cancel_cmd(trials: tuple[str, ...], namespace: str | None) -> None:
    """Stop running TRIALS; each ends Failed with reason Cancelled, its record and logs kept
    (the same as `kubectl annotate trial NAME shipyard.dev/cancel=true`)."""
    from shipyard.kube.errors import ApiException
    from shipyard.kube.trials import request_cancel

    ns = namespace_or_default(namespace)
    for name in trials:
        try:
            obj = request_cancel(ns, name)
        except ApiException as e:
            if e.status == 404:
                fail(f"trial {name} not found in namespace {ns}")
            raise
        phase = (obj.get("status") or {}).get("phase", "Pending")
        if is_finished_phase(phase):
            click.echo(f"trial {name} already finished ({phase}); nothing to cancel")
        else:
            click.echo(f"trial {name}: cancellation requested")


# ---------------------------------------------------------------- logs


def log_keys(trial: dict[str, Any], data: dict[str, str], phase: str | None,
             step: str | None) -> list[str]:
    """The logs ConfigMap keys to print, in the order the phases ran (pure; unit-tested)."""
    status = trial.get("status") or {}
    steps = [s["name"] for s in status.get("steps") or []]
    if step is not None and not steps:
        fail(f"trial {trial['metadata']['name']} is single-step; --step does not apply")
    if step is not None and step not in steps:
        fail(f"trial {trial['metadata']['name']} has no step {step!r} "
             f"(steps: {', '.join(steps)})")
    kinds = [phase] if phase else ["agent", "verifier"]
    order: list[str] = []
    for s in ([step] if step else steps) or [None]:
        for kind in kinds:
            order.append(f"{_step_key(s)}.{kind}.log" if s else f"{kind}.log")
    present = [k for k in order if k in data]
    if phase is None and step is None:  # anything else the ConfigMap holds, at the end
        present += sorted(k for k in data if k not in order)
    return present


def _step_key(step: str) -> str:
    import re

    return re.sub(r"[^-._a-zA-Z0-9]+", "_", step)


@click.command("logs")
@click.argument("trial", required=False)
@click.option("--phase", type=click.Choice(["agent", "verifier"]), default=None,
              help="Only this phase's log.")
@click.option("--step", default=None, help="Only this step of a multi-step trial.")
@click.option("--service", default=None,
              help="Only this docker-compose service's log (a sidecar of the trial pod).")
@click.option("--build", "build", default=None, metavar="JOB",
              help="Instead: the whole log of an image build Job (named in ImageBuildFailed).")
@NAMESPACE_OPTION
def logs_cmd(trial: str | None, phase: str | None, step: str | None, service: str | None,
             build: str | None, namespace: str | None) -> None:
    """Print a TRIAL's agent and verifier logs (kept in its logs ConfigMap) and its
    docker-compose services' logs, or with --build the log of an image build."""
    from shipyard.kube.trials import configmap_data, get

    ns = namespace_or_default(namespace)
    if build is not None:
        _build_log(ns, build)
        return
    if trial is None:
        fail("name a TRIAL (or an image build with --build JOB)")
    obj = get("trials", ns, trial)
    if obj is None:
        fail(f"trial {trial} not found in namespace {ns}")
    status = obj.get("status") or {}
    cm = status.get("logsConfigMap")
    data = configmap_data(ns, cm) if cm else None
    if not data:
        fail(f"trial {trial} has no logs yet (phase {status.get('phase', 'Pending')})")
    if service is not None:
        from shipyard.plan.compose import service_log_key

        if service_log_key(service) not in data:
            kept = sorted(k.split(".")[1] for k in data if k.startswith("service."))
            fail(f"trial {trial} has no log of service {service!r}; services with a log: "
                 f"{', '.join(kept) or 'none'}")
        keys = [service_log_key(service)]
    else:
        keys = log_keys(obj, data, phase, step)
    if not keys:
        what = " ".join(p for p in (step and f"step {step}", phase and f"{phase} phase") if p)
        fail(f"trial {trial} has no {what or ''} log yet; it has: {', '.join(sorted(data))}")
    for i, key in enumerate(keys):
        if len(keys) > 1:
            click.echo(f"{'' if i == 0 else chr(10)}==> {key} <==")
        text = data[key]
        if not text and len(keys) > 1:
            text = "(empty)\n"
        click.echo(text, nl=not text.endswith("\n"))


def _build_log(namespace: str, job: str) -> None:
    from shipyard.kube.image_builds import job_log
    from shipyard.render.build_job import BUILD_CONTAINER

    text = job_log(namespace, job, BUILD_CONTAINER)
    if text is None:
        fail(f"image build Job {job} (or its pod) not found in namespace {namespace}")
    click.echo(text, nl=not text.endswith("\n"))


# ---------------------------------------------------------------- results


def result_rows(trials: list[dict[str, Any]], now: datetime) -> list[list[str]]:
    rows = []
    for t in trials:
        status = t.get("status") or {}
        rewards = status.get("rewards")
        extra = "" if not rewards or set(rewards) == {"reward"} else json.dumps(
            rewards, sort_keys=True)
        rows.append([
            t["metadata"]["name"],
            (t.get("spec") or {}).get("taskRef", {}).get("name", ""),
            (t.get("spec") or {}).get("agent", {}).get("name", "oracle"),
            status.get("phase", "Pending"),
            number(status.get("reward")),
            extra,
            trial_reason(t),
            duration(status.get("startedAt"), status.get("finishedAt"), now),
        ])
    return rows


def trial_logs(trials: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Each trial's logs ConfigMap, by trial name."""
    from shipyard.kube.trials import configmap_data

    logs = {}
    for t in trials:
        cm = (t.get("status") or {}).get("logsConfigMap")
        if cm:
            logs[t["metadata"]["name"]] = configmap_data(t["metadata"]["namespace"], cm) or {}
    return logs


def trial_artifacts(trials: list[dict[str, Any]]) -> dict[str, TrialArtifacts]:
    """Each trial's kept artifacts (`render.artifacts_store`) as Harbor's `artifacts/` folder
    and manifest, by trial name; cleaned again here, as for a verifier (regular files and
    folders only, within the size limit). A multi-step trial's steps each under
    `steps/<step>/artifacts/` (its last step's kept under the trial's own names, an earlier
    one's under names with its index)."""
    from shipyard.api.conventions import artifacts_configmap_name
    from shipyard.kube import artifacts as kube_artifacts
    from shipyard.render.artifact_bundle import ArtifactsRefused, clean_artifacts
    from shipyard.render.artifacts_store import (
        kept_entries,
        kept_refusal,
        kept_step,
        part_bytes,
        parts_of,
    )

    def one(ns: str, name: str, uid: str, index: int | None) -> TrialArtifacts | None:
        first = kube_artifacts.load(ns, [artifacts_configmap_name(name, 0, index)], uid)
        if not first:
            return None
        entries = kept_entries(first[0])
        rest = kube_artifacts.load(ns, [artifacts_configmap_name(name, i, index)
                                        for i in range(1, parts_of(first[0]))], uid)
        if entries is None or rest is None:
            return None  # kept by an older operator, or a part is gone
        refused = kept_refusal(first[0])
        raw = b"".join(part_bytes(cm) for cm in [*first, *rest])
        try:
            clean = clean_artifacts(raw, [e.source for e in entries])
        except ArtifactsRefused as e:
            clean, refused = None, str(e)
        return harbor_artifacts(clean.tar if clean else b"", entries, kept_step(first[0]),
                                refused, clean.skipped if clean else ())

    found = {}
    for t in trials:
        ns, name = t["metadata"]["namespace"], t["metadata"]["name"]
        steps = len((t.get("status") or {}).get("steps") or [])
        uid = t["metadata"].get("uid", "")
        kept = [one(ns, name, uid, index) for index in range(1, steps)]  # earlier steps'
        kept.append(one(ns, name, uid, None))
        merged = TrialArtifacts()
        for part in kept:
            if part is not None:
                merged.files.update(part.files)
                merged.notes += part.notes
        if any(part is not None for part in kept):
            found[name] = merged
    return found


@click.command("results")
@click.argument("trials", nargs=-1)
@NAMESPACE_OPTION
@ALL_NAMESPACES
@SELECTOR
@click.option("--sweep", default=None, help=f"Only the trials of this sweep ({LABEL_SWEEP}).")
@click.option("--json", "as_json", is_flag=True,
              help="Harbor's JobResult JSON (stats, metrics, pass@k) with every trial's "
                   "TrialResult in trial_results.")
@click.option("--output-dir", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Write a Harbor job directory: DIR/result.json and DIR/<trial>/result.json.")
def results_cmd(trials: tuple[str, ...], namespace: str | None, all_namespaces: bool,
                selector: str | None, sweep: str | None, as_json: bool,
                output_dir: Path | None) -> None:
    """Rewards per trial (all trials of the namespace, or the TRIALS named)."""
    from shipyard.kube.trials import list_objects

    scope = _scope(namespace, all_namespaces)
    if sweep:
        selector = ",".join(s for s in (selector, selector_string(sweep_selector(sweep))) if s)
    objs = _by_creation(list_objects("trials", scope, selector))
    if trials:
        objs = [o for o in objs if o["metadata"]["name"] in set(trials)]
        missing = set(trials) - {o["metadata"]["name"] for o in objs}
        if missing:
            fail(f"trials not found: {', '.join(sorted(missing))}")
    now = datetime.now(UTC)
    tasks = {f"{t['metadata'].get('namespace', '')}/{t['metadata']['name']}": t
             for t in list_objects("tasks", scope)}
    job = job_result(objs, tasks, now)
    if output_dir is not None:
        write_job_dir(output_dir, job, trial_logs(objs), artifacts=trial_artifacts(objs))
    if as_json:
        click.echo(json.dumps(job, indent=2))
        return
    if output_dir is not None:
        click.echo(f"wrote {output_dir}/result.json and {len(objs)} trial result(s)", err=True)
    if not objs:
        click.echo("No trials found.", err=True)
        return
    click.echo(table(["NAME", "TASK", "AGENT", "PHASE", "REWARD", "REWARDS", "REASON",
                      "DURATION"], result_rows(objs, now)))
    for key, stats in job["stats"]["evals"].items():
        metric = ", ".join(f"{k} {v:.3g}" for k, v in stats["metrics"][0].items())
        passes = ", ".join(f"pass@{k} {v:.3g}" for k, v in stats["pass_at_k"].items())
        line = f"{key}: {stats['n_trials']} trial(s) with rewards, {metric}"
        click.echo(line + (f", {passes}" if passes else "")
                   + (f", {stats['n_errors']} error(s)" if stats["n_errors"] else ""))


def write_job_dir(directory: Path, job: dict[str, Any],
                  logs: dict[str, dict[str, str]] | None = None,
                  config: dict[str, Any] | None = None,
                  artifacts: dict[str, TrialArtifacts] | None = None) -> None:
    """Harbor's layout: the job's result.json (without trial_results, as Harbor writes it)
    and a directory per trial (`harbor_results.trial_files`: its result.json, rewards and,
    from `logs`, each trial's logs ConfigMap, its agent and verifier logs; from `artifacts`,
    its `artifacts/` folder and manifest). What an artifact lost is said on stderr."""
    directory.mkdir(parents=True, exist_ok=True)
    summary = {k: v for k, v in job.items() if k != "trial_results"}
    (directory / "result.json").write_text(json.dumps(summary, indent=2) + "\n")
    if config is not None:
        (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for result in job["trial_results"]:
        files = trial_files(result, (logs or {}).get(result["trial_name"]))
        for relative, text in files.items():
            path = directory / result["trial_name"] / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        kept = (artifacts or {}).get(result["trial_name"])
        if kept is not None:
            write_artifacts(directory / result["trial_name"], kept)
            for note in kept.notes:
                click.echo(f"{result['trial_name']}: {note}", err=True)


def write_artifacts(trial_dir: Path, kept: TrialArtifacts) -> None:
    """The artifacts' files under the trial's directory; never through a link already there
    (their names are plain relative paths, made so by the operator's cleaning)."""
    root = trial_dir.resolve()
    for relative, data in sorted(kept.files.items()):
        path = trial_dir / relative
        if not path.resolve().is_relative_to(root) or path.is_symlink():
            fail(f"{path}: not written, it would leave {trial_dir}")
        if relative.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
