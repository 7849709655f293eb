"""Warm pods' pure parts: which trials claim, a Sweep's sizing, the warm pod's spec and key,
the claim patch, a pool's decisions, and a claimed pod lost before its first phase."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from shipyard.api.conventions import (
    ANNOTATION_CLAIMED_BY,
    LABEL_COMPONENT,
    LABEL_NETWORK,
    LABEL_QUEUE_NAME,
    LABEL_TRIAL,
    LABEL_WARM_KEY,
    Role,
)
from shipyard.api.models import TrialStatus
from shipyard.api.reasons import Reason
from shipyard.plan.warm import claims_warm_pod, pool_trial, sweep_warm_target
from shipyard.reconcile import trial_machine as m
from shipyard.reconcile.pod_observation import PodObservation, observe_pod
from shipyard.reconcile.warm_pool import (
    CLAIM_SETTLE_SEC,
    DEAD_BACKOFF_SEC,
    ClaimWatch,
    DeadWatch,
    WarmPod,
    claimable,
    dead_hold,
    decide,
    observe_warm_pod,
    refill_hold,
)
from shipyard.render.warm_pod import build_warm_pod, claim_patch, warm_key, warm_spec
from tests.unit.helpers import T0, at, plan_for, pod, trial_body

SECRETS = {"agent": {"name": "oracle", "envFrom": [{"secretRef": {"name": "openai"}}]}}
POOL = {"apiVersion": "shipyard.dev/v1alpha1", "kind": "WarmPool",
        "metadata": {"name": "hello-pool", "namespace": "ns", "uid": "u-pool", "generation": 2},
        "spec": {"taskRef": {"name": "hello"}, "replicas": 2}}


def test_kueue_and_compose_trials_do_not_claim() -> None:
    plan = plan_for()
    assert claims_warm_pod(plan, {}, False)
    assert not claims_warm_pod(plan, {LABEL_QUEUE_NAME: "q"}, False)
    assert not claims_warm_pod(plan, {}, True)


def test_a_sweep_keeps_no_more_than_it_can_use() -> None:
    assert sweep_warm_target(4, 40, 8) == 4
    assert sweep_warm_target(4, 2, 8) == 2  # two trials left to start
    assert sweep_warm_target(20, 40, 8) == 8  # capped
    assert sweep_warm_target(None, 40, 8) == 8
    assert sweep_warm_target(4, 0, 8) == 0  # every trial has its pod: released
    assert sweep_warm_target(4, 40, 0) == 0  # turned off


def test_a_sweep_warms_ahead_of_its_slots_but_never_more_than_its_trials_left() -> None:
    assert sweep_warm_target(4, 40, 100, ahead=2) == 8  # two per slot
    assert sweep_warm_target(4, 5, 100, ahead=2) == 5  # each pod has a trial to claim it
    assert sweep_warm_target(10, 60, 16, ahead=2) == 16  # capped
    assert sweep_warm_target(4, 40, 100, ahead=0) == 4  # at least one per slot


def test_the_warm_spec_has_no_secret_and_is_the_same_for_every_trial_of_the_fit() -> None:
    plan, secret_plan = plan_for(), plan_for(**SECRETS)
    a = warm_spec(trial_body("a"), plan, None)
    b = warm_spec(trial_body("b-other-name"), secret_plan, None)
    assert warm_spec(trial_body("b"), plan, None) == a  # nothing of the trial's name
    assert [c["name"] for c in a["containers"]] == ["main"]  # no Secrets: no secrets container
    assert [c["name"] for c in b["containers"]] == ["main", "secrets"]
    assert warm_key(a) != warm_key(b)
    assert not any("secret" in v for v in b["volumes"])
    text = str(b)
    assert "openai" not in text and "/run/shipyard-secrets/0" not in text
    other = {"agent": {"name": "nop", "envFrom": [{"secretRef": {"name": "anthropic"}}]}}
    assert warm_key(warm_spec(trial_body("c"), plan_for(**other), None)) == warm_key(b)
    # a pool's Trial renders the same pod as the trials it serves
    assert warm_key(warm_spec(pool_trial(POOL), plan, None)) == warm_key(a)


def test_anything_of_the_pod_makes_another_key() -> None:
    base = warm_key(warm_spec(trial_body(), plan_for(), None))
    assert warm_key(warm_spec(trial_body(), plan_for(environment={"overrideCpus": 2}),
                              None)) != base
    assert warm_key(warm_spec(trial_body(), plan_for(environment={"image": "busybox:1"}),
                              None)) != base
    assert warm_key(warm_spec(trial_body(), plan_for(pod={"nodeSelector": {"a": "b"}}),
                              None)) != base
    assert warm_key(warm_spec(trial_body(), plan_for(), "busybox")) != base  # probe container


def test_a_warm_pod_is_under_the_deny_all_and_the_claim_makes_it_the_trials() -> None:
    plan = plan_for()
    spec = warm_spec(pool_trial(POOL), plan, None)
    manifest = build_warm_pod(POOL, "hello", spec, warm_key(spec))
    labels = manifest["metadata"]["labels"]
    assert labels[LABEL_TRIAL] == "" and LABEL_NETWORK not in labels  # baseline deny only
    assert labels[LABEL_COMPONENT] == "warm" and labels[LABEL_WARM_KEY] == warm_key(spec)
    assert manifest["metadata"]["ownerReferences"][0]["kind"] == "WarmPool"
    manifest["metadata"].update(name="hello-pool-w-abcde", resourceVersion="42")
    ops = claim_patch(trial_body(), plan, manifest)
    patched = apply_json_patch(manifest, ops)["metadata"]
    assert patched["resourceVersion"] == "42"
    assert patched["labels"][LABEL_TRIAL] == "hello-oracle"
    assert patched["labels"][LABEL_COMPONENT] == "environment"
    assert LABEL_WARM_KEY not in patched["labels"]
    assert patched["labels"][LABEL_NETWORK] == plan.network.baseline(Role.ENV, None)
    assert patched["annotations"] == {ANNOTATION_CLAIMED_BY: trial_body()["metadata"]["uid"]}
    assert [o["kind"] for o in patched["ownerReferences"]] == ["Trial"]


def apply_json_patch(doc: dict, ops: list[dict]) -> dict:
    """RFC 6902 add/replace/remove on maps (what a claim uses), for the test."""
    import copy

    doc = copy.deepcopy(doc)
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~")
                          for p in op["path"].split("/")[1:]]
        target = doc
        for p in parents:
            target = target[p]
        if op["op"] == "remove":
            del target[last]
        else:
            target[last] = op["value"]
    return doc


def warm(name: str, state: str, key: str = "k", age: float = 0) -> WarmPod:
    return WarmPod(name, "1", key, state, T0 - timedelta(seconds=age))  # type: ignore[arg-type]


def test_a_pool_replaces_the_dead_and_the_stale_and_sheds_the_least_advanced() -> None:
    pods = [warm("a", "ready", age=9), warm("b", "starting", age=5), warm("c", "dead"),
            warm("d", "ready", key="old"), warm("e", "deleting")]
    d = decide(3, "k", pods, claimed=1, generation=2, now=T0)
    assert [p.name for p in d.delete] == ["c", "d"]
    assert d.create == 1
    assert (d.status.ready, d.status.starting, d.status.claimed) == (1, 1, 1)
    assert d.status.conditions[0].reason == Reason.PODS_STARTING
    shrink = decide(1, "k", pods, claimed=0, generation=2, now=T0)
    assert {p.name for p in shrink.delete} == {"b", "c", "d"} and shrink.create == 0
    assert shrink.status.conditions[0].reason == Reason.POOL_READY
    blocked = decide(3, None, pods, 0, 2, T0, "waiting for the task's image")
    assert blocked.create == 0 and {p.name for p in blocked.delete} == {"a", "b", "c", "d"}
    assert blocked.status.conditions[0].reason == Reason.POOL_NOT_READY


def test_a_shrinking_pool_deletes_the_newest_starting_pod_not_the_one_closest_to_running(
        ) -> None:
    """Over the wanted number, the least advanced goes: a starting pod before a ready one, and
    of the starting ones the newest (the oldest has the most of its start done)."""
    pods = [warm("old", "starting", age=4), warm("ready", "ready", age=9),
            warm("new", "starting", age=1)]
    assert [p.name for p in decide(2, "k", pods, 0, 2, T0).delete] == ["new"]
    assert [p.name for p in decide(1, "k", pods, 0, 2, T0).delete] == ["new", "old"]


def test_claims_take_ready_pods_first_then_the_oldest() -> None:
    pods = [warm("young", "starting", age=1), warm("old", "starting", age=9),
            warm("ready", "ready"), warm("dead", "dead"), warm("other", "ready", key="x")]
    assert [p.name for p in claimable(pods, "k")] == ["ready", "old", "young"]


def test_warm_pod_states() -> None:
    assert observe_warm_pod(pod(container_state={"running": {}})).state == "ready"
    assert observe_warm_pod(pod(phase="Pending")).state == "starting"
    assert observe_warm_pod(pod(deleting=True)).state == "deleting"
    assert observe_warm_pod(pod(phase="Failed")).state == "dead"


def test_a_failing_pool_says_why_and_replaces_its_dead_pods_after_a_backoff() -> None:
    """An image that does not pull: the pool said `0 of 2 pods ready` and nothing more, and
    one whose pull fails for good made and deleted a pod every second."""
    pull = ("ErrImagePull: failed to pull and unpack image \"localhost/nope:1\": failed to "
            "resolve reference: connection refused")
    stuck = observe_warm_pod(pod(phase="Pending", container_state={"waiting": {
        "reason": "ErrImagePull", "message": pull.split(": ", 1)[1]}}))
    assert (stuck.state, stuck.problem) == ("starting", pull)
    d = decide(2, "k", [replace(stuck, name="p1", key="k")], 0, 1, T0)
    assert d.status.conditions[0].reason == Reason.PODS_STARTING
    assert d.status.conditions[0].message == f"0 of 2 pods ready; pod p1: {pull}"
    dead = replace(warm("p2", "dead"), problem="the environment pod stopped (Failed): x")
    d = decide(2, "k", [dead], 0, 1, T0)
    assert d.status.conditions[0].reason == Reason.PODS_FAILING
    message = d.status.conditions[0].message
    assert "pod p2 failed: the environment pod stopped (Failed): x" in message
    assert d.delete == [dead] and d.create == 2  # created once the hold is over:
    hold, seen = dead_hold(DeadWatch(), [dead], 100.0)
    why = "pod p2 failed: the environment pod stopped (Failed): x"
    assert (hold, seen) == (DEAD_BACKOFF_SEC, DeadWatch(100.0, why))
    assert dead_hold(seen, [], 110.0) == (DEAD_BACKOFF_SEC - 10, seen)
    # the dead pod is gone, its replacement waits: the pool still says why
    d = decide(2, "k", [], 0, 1, T0, failed=seen.why)
    assert d.status.conditions[0].reason == Reason.PODS_FAILING and why in message
    # past the hold its replacements start, and the pool still says why until one is ready
    # (under load the replacements' own pull errors came later: `0 of 2 pods ready` alone)
    assert dead_hold(seen, [], 100.0 + DEAD_BACKOFF_SEC) == (0.0, seen)
    assert dead_hold(seen, [warm("p3", "starting")], 100.0 + DEAD_BACKOFF_SEC) == (0.0, seen)
    assert dead_hold(seen, [warm("p3", "ready")], 100.0 + DEAD_BACKOFF_SEC) == (0.0, DeadWatch())
    assert dead_hold(DeadWatch(), [], 5.0) == (0.0, DeadWatch())


def test_a_claimed_pod_lost_before_its_first_phase_costs_no_retry() -> None:
    plan = plan_for()
    started = m.start(TrialStatus(), plan, "sha256:d", 1, T0)
    status = m.on_pod_created(started, Role.ENV, "w1", T0, warm=True)
    assert status.warm_pod == "w1"
    action, new, outcome = m.next_action(status, plan, m.Pods(PodObservation.absent(),
                                                              PodObservation.absent()), at(1))
    assert isinstance(action, m.CreatePod) and new.pod_name is None and new.warm_pod is None
    assert new.attempt == 1 and outcome.events[0][1] == Reason.WARM_POD_LOST
    dead = observe_pod(pod(phase="Failed"))
    _, new, outcome = m.next_action(status, plan, m.Pods(dead, PodObservation.absent()), at(1))
    assert new.attempt == 1 and outcome.delete_pods == ["w1"]
    # a cold pod lost the same way is the usual failure
    cold = m.on_pod_created(started, Role.ENV, "c1", T0)
    assert cold.warm_pod is None
    action, new, _ = m.next_action(cold, plan, m.Pods(PodObservation.absent(),
                                                      PodObservation.absent()), at(1))
    assert m.terminal_condition(new).reason == Reason.POD_LOST


def test_a_sweep_keeps_one_pool_per_task_with_trials_left_and_none_when_suspended() -> None:
    from shipyard.api.sweep import SweepSpec
    from shipyard.plan.sweep import expand
    from shipyard.plan.warm import sweep_pools

    sweep = {"metadata": {"name": "sw", "namespace": "ns", "uid": "u-sw"}}
    spec = SweepSpec.model_validate({"tasks": {"names": ["a", "b"]}, "agents": [{"name": "oracle"}],
                                     "attempts": 5, "parallelism": 3,
                                     "trialTemplate": {"environment": {"overrideCpus": 1}}})
    slots = expand(["a", "b"], spec)
    unstarted = {"a": [s for s in slots if s.task == "a"],
                 "b": [s for s in slots if s.task == "b"][:1]}
    pools = sweep_pools(sweep, spec, slots, unstarted, cap=8)
    assert sorted(p["spec"]["replicas"] for p in pools.values()) == [1, 3]
    a = next(p for p in pools.values() if p["spec"]["taskRef"] == {"name": "a"})
    assert a["spec"]["agent"]["name"] == "oracle"
    assert a["spec"]["environment"] == {"overrideCpus": 1.0}
    assert a["metadata"]["ownerReferences"][0]["kind"] == "Sweep"
    assert sweep_pools(sweep, spec.model_copy(update={"suspend": True}), slots, unstarted, 8) == {}
    assert sweep_pools(sweep, spec, slots, unstarted, 0) == {}
    queued = {"metadata": {**sweep["metadata"], "labels": {LABEL_QUEUE_NAME: "q"}}}
    assert sweep_pools(queued, spec, slots, unstarted, 8) == {}


def test_a_warm_pod_gets_the_operator_s_runner_as_a_cold_pod_does() -> None:
    plan = plan_for()
    spec = warm_spec(trial_body(), plan, None, "localhost/shipyard/runner:abc")
    images = [c["image"] for c in spec.get("initContainers", [])]
    assert "localhost/shipyard/runner:abc" in images
    assert warm_key(spec) != warm_key(warm_spec(trial_body(), plan, None))


def test_a_sweeps_pool_waits_for_its_sweep_after_a_claim_before_replacing_the_pod() -> None:
    """A claim lowers what a Sweep wants by one near its end, written after the claim: its
    pool replaces a claimed pod only CLAIM_SETTLE_SEC after the claim (by then the spec says
    whether the Sweep still wants it). A WarmPool of its own replaces at once."""
    before, after = frozenset({"p1"}), frozenset({"p1", "p2"})
    hold, seen = refill_hold(ClaimWatch(before), after, True, 100.0)  # p2 claimed
    assert hold == CLAIM_SETTLE_SEC and seen.waiting_since == 100.0
    hold, seen = refill_hold(seen, frozenset({"p1", "p2", "p3"}), True, 100.4)  # another
    assert 0 < hold < CLAIM_SETTLE_SEC and seen.waiting_since == 100.0  # not pushed back
    hold, seen = refill_hold(seen, after, True, 100.0 + CLAIM_SETTLE_SEC)
    assert hold == 0 and seen.waiting_since is None
    # One trial ended (its pod gone) and another claimed between two passes: still a claim.
    assert refill_hold(ClaimWatch(after), frozenset({"p2", "p3"}), True, 100.0)[0] > 0
    assert refill_hold(ClaimWatch(before), after, False, 100.0)[0] == 0  # its own pool
    assert refill_hold(ClaimWatch(after), after, True, 100.0)[0] == 0  # no new claim
