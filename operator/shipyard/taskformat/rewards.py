"""Reading ``/logs/verifier/reward.json`` or ``reward.txt`` (Harbor `verifier/verifier.py`).

The exit code of the test script plays no part: only the reward files count.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import ClassVar

REWARD_DIR = "/logs/verifier"
REWARD_JSON = f"{REWARD_DIR}/reward.json"
REWARD_TXT = f"{REWARD_DIR}/reward.txt"
INT_LIMIT = 2**63
"""Integers are kept as integers (Harbor's `float | int`) within Kubernetes' int64."""


class RewardFileError(Exception):
    """No usable reward; ``harbor_exception`` is the class Harbor raises in that case."""

    harbor_exception: ClassVar[str]


class RewardFileMissing(RewardFileError):
    harbor_exception = "RewardFileNotFoundError"


class RewardFileEmpty(RewardFileError):
    harbor_exception = "RewardFileEmptyError"


class RewardFileInvalid(RewardFileError):
    """Unparsable, non-numeric or non-finite. For a reward.json that is not an object, Harbor
    fails with a pydantic ValidationError instead; both are verifier failures."""

    harbor_exception = "VerifierOutputParseError"


def parse_rewards(reward_json: bytes | None, reward_txt: bytes | None) -> dict[str, float | int]:
    """The rewards of one verification; None means the file does not exist.

    reward.json wins over reward.txt. JSON must be an object of finite numbers (a bool counts as
    an int); the text file holds one finite float and becomes ``{"reward": value}``.
    """
    if reward_json is not None:
        return _parse_json(reward_json)
    if reward_txt is not None:
        return {"reward": _parse_text(reward_txt)}
    raise RewardFileMissing(f"No reward file found at {REWARD_TXT} or {REWARD_JSON}")


def _parse_json(content: bytes) -> dict[str, float | int]:
    if not content:
        raise RewardFileEmpty(f"Reward file is empty at {REWARD_JSON}")
    try:
        data = json.loads(content)
    except ValueError:  # also covers invalid UTF-8
        raise RewardFileInvalid(f"Failed to parse rewards from JSON file {REWARD_JSON}") from None
    except RecursionError:  # the task's file: nested thousands deep
        raise RewardFileInvalid(f"Rewards in JSON file {REWARD_JSON} are nested too deeply to "
                                "parse") from None
    if not isinstance(data, dict):
        raise RewardFileInvalid(
            f"Rewards in JSON file {REWARD_JSON} must be an object mapping names to numbers"
        )
    rewards: dict[str, float | int] = {}
    for key, value in data.items():
        if not isinstance(value, int | float):
            raise RewardFileInvalid(f"Non-numeric reward {key!r} in JSON file {REWARD_JSON}")
        if isinstance(value, float) and not math.isfinite(value):
            raise RewardFileInvalid(f"Non-finite reward {value} in JSON file {REWARD_JSON}")
        if isinstance(value, int) and not -INT_LIMIT <= value < INT_LIMIT:
            shown = str(value)
            shown = shown if len(shown) <= 40 else f"{shown[:20]}...({len(shown)} digits)"
            raise RewardFileInvalid(
                f"Reward {key!r} in JSON file {REWARD_JSON} is an integer beyond 64 bits "
                f"({shown}); Kubernetes cannot store it")
        rewards[key] = int(value) if isinstance(value, bool) else value
    return rewards


def _parse_text(content: bytes) -> float:
    if not content:
        raise RewardFileEmpty(f"Reward file is empty at {REWARD_TXT}")
    try:
        value = float(content.decode("utf-8"))
    except ValueError:  # also covers invalid UTF-8
        raise RewardFileInvalid(f"Failed to parse rewards from text file {REWARD_TXT}") from None
    if not math.isfinite(value):
        raise RewardFileInvalid(f"Non-finite reward {value} in text file {REWARD_TXT}")
    return value


# ---------------------------------------------------------------- aggregation (Harbor)


def aggregate_steps(strategy: str, executed: list[Mapping[str, float] | None]
                    ) -> dict[str, float] | None:
    """Harbor's multi-step reward from the executed steps' rewards, in order (None: a step
    without a result): `final` = the last executed step's result; `mean` = per-key mean over
    the steps with a result, a missing key counting as 0. None when there is nothing to
    aggregate."""
    if strategy == "final":
        last = executed[-1] if executed else None
        return dict(last) if last is not None else None
    results = [r for r in executed if r is not None]
    keys = list(dict.fromkeys(k for r in results for k in r))
    if not results or not keys:
        return None
    return {k: sum(r.get(k, 0.0) for r in results) / len(results) for k in keys}


def below_min_reward(rewards: Mapping[str, float],
                     threshold: float | Mapping[str, float] | None) -> str | None:
    """Harbor's `_should_stop_after_step`: why a step's rewards fall short of its `min_reward`
    (a number for `reward`, or a minimum per key), None when they do not. A missing key
    counts as -inf."""
    if threshold is None:
        return None
    checks = threshold if isinstance(threshold, Mapping) else {"reward": threshold}
    for key, minimum in checks.items():
        actual = rewards.get(key, -math.inf)
        if actual < minimum:
            shown = "missing" if actual == -math.inf else f"{actual:g}"
            return f"{key} {shown} < min_reward {minimum:g}"
    return None
