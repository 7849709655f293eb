"""The Harbor 0.25 task format: models, loading, validation, resolution, reward parsing and
Harbor's job metrics.

Pure: no network, no Kubernetes. Specification: ``docs/harbor.md`` §a.
"""

from shipyard.taskformat.artifacts import (
    ArtifactConfig,
    collection_set,
    convention_source,
    host_path,
    overlap_warnings,
)
from shipyard.taskformat.environment import (
    EnvironmentConfig,
    HealthcheckConfig,
    MCPServerConfig,
    TaskOS,
    TpuSpec,
)
from shipyard.taskformat.envtemplates import MissingEnvVar, resolve_env_templates
from shipyard.taskformat.errors import TaskFormatError
from shipyard.taskformat.instructions import strip_canary
from shipyard.taskformat.lint import LintWarning, lint_config, lint_task, unknown_keys
from shipyard.taskformat.loader import LoadedTask, files_digest, load_task_dir, load_task_files
from shipyard.taskformat.metrics import aggregate_mean, aggregate_rewards, harbor_sum, pass_at_k
from shipyard.taskformat.models import (
    AgentConfig,
    PackageInfo,
    SolutionConfig,
    StepConfig,
    TaskConfig,
    VerifierCollectConfig,
    VerifierConfig,
    load_task_config,
    task_config_json,
)
from shipyard.taskformat.netplan import NetworkPlan, resolve_network_plan
from shipyard.taskformat.network import (
    AllowlistEntryType,
    NetworkMode,
    NetworkPolicy,
    classify_allowlist_entry,
    merge_extra_allowlists,
    normalize_allowed_hosts,
)
from shipyard.taskformat.resolve import (
    StepSettings,
    VerifierEnvironment,
    VerifierMode,
    effective_timeout,
    resolve_verifier_environment,
    resolve_verifier_mode,
    step_settings,
)
from shipyard.taskformat.rewards import (
    RewardFileEmpty,
    RewardFileError,
    RewardFileInvalid,
    RewardFileMissing,
    aggregate_steps,
    below_min_reward,
    parse_rewards,
)
from shipyard.taskformat.sizes import parse_size_to_mb

__all__ = [
    "AgentConfig",
    "AllowlistEntryType",
    "ArtifactConfig",
    "EnvironmentConfig",
    "HealthcheckConfig",
    "LintWarning",
    "LoadedTask",
    "MCPServerConfig",
    "MissingEnvVar",
    "NetworkMode",
    "NetworkPlan",
    "NetworkPolicy",
    "PackageInfo",
    "RewardFileEmpty",
    "RewardFileError",
    "RewardFileInvalid",
    "RewardFileMissing",
    "SolutionConfig",
    "StepConfig",
    "StepSettings",
    "TaskConfig",
    "TaskFormatError",
    "TaskOS",
    "TpuSpec",
    "VerifierCollectConfig",
    "VerifierConfig",
    "VerifierEnvironment",
    "VerifierMode",
    "aggregate_mean",
    "aggregate_rewards",
    "aggregate_steps",
    "below_min_reward",
    "classify_allowlist_entry",
    "collection_set",
    "convention_source",
    "effective_timeout",
    "files_digest",
    "harbor_sum",
    "host_path",
    "lint_config",
    "lint_task",
    "load_task_config",
    "load_task_dir",
    "load_task_files",
    "merge_extra_allowlists",
    "normalize_allowed_hosts",
    "overlap_warnings",
    "parse_rewards",
    "parse_size_to_mb",
    "pass_at_k",
    "resolve_env_templates",
    "resolve_network_plan",
    "resolve_verifier_environment",
    "resolve_verifier_mode",
    "step_settings",
    "strip_canary",
    "task_config_json",
    "unknown_keys",
]
