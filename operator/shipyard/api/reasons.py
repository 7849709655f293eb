"""The closed vocabulary of reasons: of a Trial's `Complete`/`Failed`/`Running` conditions, of
a Task's `Ready` condition and of the Events Shipyard posts. String-valued, so status and
Events carry exactly these words (documented in README.md and docs/trials.md).

`HarborError` holds the names of Harbor's exceptions that `status.error.type` and a step's
error record, as Harbor's own results do.
"""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    # ---- a Trial's terminal outcome: Complete
    REWARD_RECORDED = "RewardRecorded"
    # ---- a Trial's terminal outcome: Failed
    AGENT_FAILED = "AgentFailed"
    VERIFIER_TIMEOUT = "VerifierTimeout"
    REWARD_FILE_MISSING = "RewardFileMissing"
    REWARD_FILE_EMPTY = "RewardFileEmpty"
    REWARD_FILE_INVALID = "RewardFileInvalid"
    VERIFIER_FAILED = "VerifierFailed"
    HEALTHCHECK_FAILED = "HealthcheckFailed"
    ENVIRONMENT_START_TIMEOUT = "EnvironmentStartTimeout"
    ENVIRONMENT_SETUP_FAILED = "EnvironmentSetupFailed"
    STEP_FAILED = "StepFailed"
    NETWORK_POLICY_UNENFORCEABLE = "NetworkPolicyUnenforceable"
    TASK_INVALID = "TaskInvalid"
    TASK_NOT_FOUND = "TaskNotFound"
    TRIAL_INVALID = "TrialInvalid"
    IMAGE_PULL_FAILED = "ImagePullFailed"
    UNSCHEDULABLE = "Unschedulable"
    POD_LOST = "PodLost"
    POD_REJECTED = "PodRejected"
    OOM_KILLED = "OOMKilled"
    SECRET_NOT_FOUND = "SecretNotFound"
    CANCELLED = "Cancelled"
    IMAGE_BUILD_FAILED = "ImageBuildFailed"
    IMAGE_BUILD_UNSUPPORTED = "ImageBuildUnsupported"
    NO_IMAGE_BUILDER = "NoImageBuilder"
    # ---- a Trial's Running condition while it runs
    ENVIRONMENT_STARTING = "EnvironmentStarting"
    WAITING_FOR_TASK = "WaitingForTask"
    WAITING_FOR_IMAGE = "WaitingForImage"
    WAITING_FOR_CAPACITY = "WaitingForCapacity"
    # ---- a WarmPool's Ready condition (docs/warm-pods.md), and a trial's warm pod Events
    POOL_READY = "PoolReady"
    PODS_STARTING = "PodsStarting"
    PODS_FAILING = "PodsFailing"
    POOL_NOT_READY = "PoolNotReady"
    WARM_POD_CLAIMED = "WarmPodClaimed"
    WARM_POD_LOST = "WarmPodLost"
    RETRYING = "Retrying"
    QUEUED = "Queued"  # waits for Kueue's admission (the Queued condition has Kueue's word)
    HEALTHCHECK_RUNNING = "HealthcheckRunning"
    SETUP_RUNNING = "SetupRunning"
    AGENT_RUNNING = "AgentRunning"
    COLLECT_RUNNING = "CollectRunning"
    VERIFIER_RUNNING = "VerifierRunning"
    # ---- a Task's Ready condition
    VALID = "Valid"
    BUNDLE_NOT_FOUND = "BundleNotFound"
    # ---- an ImageBuild's phase reasons (and a Task's ImagesReady condition)
    PENDING = "Pending"  # an ImageBuild not yet probed
    BUILDING = "Building"
    BUILD_FAILED = "BuildFailed"
    BUILD_TIMEOUT = "BuildTimeout"
    REGISTRY_UNAVAILABLE = "RegistryUnavailable"
    # ---- a Sweep's conditions (Complete, Failed, Suspended, TasksReady)
    ALL_TRIALS_FINISHED = "AllTrialsFinished"
    INVALID_SPEC = "InvalidSpec"
    DUPLICATE_AGENTS = "DuplicateAgents"
    NO_TASKS = "NoTasks"
    TOO_MANY_TRIALS = "TooManyTrials"
    SUSPENDED = "Suspended"
    RESUMED = "Resumed"
    READY = "Ready"
    WAITING_FOR_TASKS = "WaitingForTasks"
    # ---- a Trial's Queued condition (Kueue admission, reconcile/admission.py)
    ADMITTED = "Admitted"
    INSUFFICIENT_QUOTA = "InsufficientQuota"
    WAITING_FOR_QUOTA = "WaitingForQuota"
    PREEMPTED = "Preempted"  # also an attempt's reason: evicted by Kueue, queued again
    # ---- Events only
    STARTED = "Started"
    POD_CREATED = "PodCreated"
    NETWORK_POLICIES = "NetworkPolicies"
    NETWORK_NOTICE = "NetworkNotice"
    ENVIRONMENT_READY = "EnvironmentReady"
    HEALTHCHECK_PASSED = "HealthcheckPassed"
    HEALTHCHECK_STARTED = "HealthcheckStarted"
    SETUP_STARTED = "SetupStarted"
    AGENT_STARTED = "AgentStarted"
    COLLECT_STARTED = "CollectStarted"
    VERIFIER_STARTED = "VerifierStarted"
    AGENT_TIMEOUT = "AgentTimeout"
    AGENT_FINISHED = "AgentFinished"
    AGENT_PROCESSES_ENDED = "AgentProcessesEnded"
    STEP_REWARDED = "StepRewarded"
    ARTIFACTS_SKIPPED = "ArtifactsSkipped"  # a separate verifier gets fewer artifacts: why
    MIN_REWARD_NOT_MET = "MinRewardNotMet"
    COMPLETED = "Completed"  # the finished trial's phase
    FAILED = "Failed"

    @classmethod
    def running(cls, kind: str) -> Reason:
        """`<Kind>Running`: the Running condition while a phase of `kind` runs."""
        return cls(f"{kind.capitalize()}Running")

    @classmethod
    def started(cls, kind: str) -> Reason:
        """`<Kind>Started`: the Event when a phase of `kind` starts."""
        return cls(f"{kind.capitalize()}Started")


REASONS_COMPLETE = frozenset({Reason.REWARD_RECORDED})
REASONS_FAILED = frozenset({
    Reason.AGENT_FAILED, Reason.VERIFIER_TIMEOUT, Reason.REWARD_FILE_MISSING,
    Reason.REWARD_FILE_EMPTY, Reason.REWARD_FILE_INVALID, Reason.VERIFIER_FAILED,
    Reason.HEALTHCHECK_FAILED, Reason.ENVIRONMENT_START_TIMEOUT,
    Reason.ENVIRONMENT_SETUP_FAILED, Reason.STEP_FAILED, Reason.NETWORK_POLICY_UNENFORCEABLE,
    Reason.TASK_INVALID, Reason.TASK_NOT_FOUND, Reason.TRIAL_INVALID, Reason.IMAGE_PULL_FAILED,
    Reason.UNSCHEDULABLE, Reason.POD_LOST, Reason.POD_REJECTED, Reason.OOM_KILLED,
    Reason.SECRET_NOT_FOUND, Reason.CANCELLED, Reason.IMAGE_BUILD_FAILED, Reason.BUILD_TIMEOUT,
    Reason.IMAGE_BUILD_UNSUPPORTED, Reason.NO_IMAGE_BUILDER,
})
"""The reasons a Trial's `Failed` condition may carry."""
SWEEP_REASONS = frozenset({
    Reason.ALL_TRIALS_FINISHED, Reason.INVALID_SPEC, Reason.DUPLICATE_AGENTS, Reason.NO_TASKS,
    Reason.TOO_MANY_TRIALS,
    Reason.SUSPENDED, Reason.RESUMED, Reason.READY, Reason.WAITING_FOR_TASKS,
    Reason.TASK_INVALID, Reason.TASK_NOT_FOUND,
})
"""The reasons of a Sweep's conditions (documented in docs/sweeps.md)."""
RETRYABLE = frozenset({Reason.POD_LOST, Reason.IMAGE_PULL_FAILED})
"""Infrastructure failures that a Trial's `retries` retry with a new pod."""
WAITING = frozenset({Reason.WAITING_FOR_TASK, Reason.WAITING_FOR_IMAGE, Reason.RETRYING,
                     Reason.QUEUED, Reason.WAITING_FOR_CAPACITY})
"""Running=False/True reasons of a trial that waits rather than runs a phase."""


class HarborError(StrEnum):
    """Harbor's exception names, as `status.error.type` records them."""

    AGENT = "AgentError"
    AGENT_TIMEOUT = "AgentTimeoutError"
    NON_ZERO_AGENT_EXIT = "NonZeroAgentExitCodeError"
    HEALTHCHECK = "HealthcheckError"
    RUNTIME = "RuntimeError"
    VERIFIER_TIMEOUT = "VerifierTimeoutError"
    CANCELLED = "CancelledError"
    REWARD_FILE_NOT_FOUND = "RewardFileNotFoundError"
    REWARD_FILE_EMPTY = "RewardFileEmptyError"
    VERIFIER_OUTPUT_PARSE = "VerifierOutputParseError"
    ENVIRONMENT_START_TIMEOUT = "EnvironmentStartTimeoutError"
