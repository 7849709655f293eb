"""Reward files (docs/harbor.md §a.7)."""

from __future__ import annotations

import pytest

from shipyard.taskformat import (
    RewardFileEmpty,
    RewardFileError,
    RewardFileInvalid,
    RewardFileMissing,
    aggregate_mean,
    aggregate_steps,
    below_min_reward,
    parse_rewards,
)


@pytest.mark.parametrize(
    ("text", "reward"),
    [(b"1", 1.0), (b"0\n", 0.0), (b"  0.25 \n\n", 0.25), (b"-3", -3.0), (b"1e-2", 0.01)],
)
def test_reward_txt(text: bytes, reward: float) -> None:
    rewards = parse_rewards(None, text)
    assert rewards == {"reward": reward}
    assert isinstance(rewards["reward"], float)


def test_reward_json() -> None:
    rewards = parse_rewards(b'{"accuracy": 0.95, "passed": 3, "ok": true, "bad": false}', None)
    assert rewards == {"accuracy": 0.95, "passed": 3, "ok": 1, "bad": 0}
    assert type(rewards["ok"]) is int and type(rewards["passed"]) is int
    assert parse_rewards(b"{}", None) == {}


def test_reward_json_wins_over_txt() -> None:
    assert parse_rewards(b'{"reward": 0.5}', b"1") == {"reward": 0.5}
    with pytest.raises(RewardFileEmpty):
        parse_rewards(b"", b"1")


def test_missing() -> None:
    with pytest.raises(RewardFileMissing) as info:
        parse_rewards(None, None)
    assert str(info.value) == (
        "No reward file found at /logs/verifier/reward.txt or /logs/verifier/reward.json"
    )
    assert info.value.harbor_exception == "RewardFileNotFoundError"


@pytest.mark.parametrize(
    ("json", "txt", "message"),
    [
        (b"", None, "Reward file is empty at /logs/verifier/reward.json"),
        (None, b"", "Reward file is empty at /logs/verifier/reward.txt"),
    ],
)
def test_empty(json: bytes | None, txt: bytes | None, message: str) -> None:
    with pytest.raises(RewardFileEmpty) as info:
        parse_rewards(json, txt)
    assert str(info.value) == message
    assert info.value.harbor_exception == "RewardFileEmptyError"


@pytest.mark.parametrize(
    ("json", "message"),
    [
        (b"{", "Failed to parse rewards from JSON file /logs/verifier/reward.json"),
        (b" ", "Failed to parse rewards from JSON file /logs/verifier/reward.json"),
        (b"\xff", "Failed to parse rewards from JSON file /logs/verifier/reward.json"),
        (b'{"x": "1"}', "Non-numeric reward 'x' in JSON file /logs/verifier/reward.json"),
        (b'{"x": null}', "Non-numeric reward 'x' in JSON file /logs/verifier/reward.json"),
        (b'{"x": [1]}', "Non-numeric reward 'x' in JSON file /logs/verifier/reward.json"),
        (b'{"x": NaN}', "Non-finite reward nan in JSON file /logs/verifier/reward.json"),
        (b'{"x": -Infinity}', "Non-finite reward -inf in JSON file /logs/verifier/reward.json"),
        (b"1", "Rewards in JSON file /logs/verifier/reward.json must be an object"),
        (b"[1]", "Rewards in JSON file /logs/verifier/reward.json must be an object"),
    ],
)
def test_invalid_json(json: bytes, message: str) -> None:
    with pytest.raises(RewardFileInvalid) as info:
        parse_rewards(json, None)
    assert str(info.value).startswith(message)
    assert info.value.harbor_exception == "VerifierOutputParseError"


def test_integers_stay_integers_within_64_bits_and_beyond_are_refused_clearly() -> None:
    """Harbor keeps `float | int`; an integer Kubernetes cannot store (beyond int64, or too
    large even for a float: the driver used to fail on it forever) is a clear parse error."""
    rewards = parse_rewards(b'{"a": 1, "b": 0.5, "c": true, "d": 9223372036854775807}', None)
    assert rewards == {"a": 1, "b": 0.5, "c": 1, "d": 2**63 - 1}
    assert [type(v) for v in rewards.values()] == [int, float, int, int]
    for huge in (b"1" + b"0" * 400, b"9223372036854775808", b"-9223372036854775809"):
        with pytest.raises(RewardFileInvalid, match="integer beyond 64 bits") as info:
            parse_rewards(b'{"x": ' + huge + b"}", None)
        assert info.value.harbor_exception == "VerifierOutputParseError"
        assert len(str(info.value)) < 200


@pytest.mark.parametrize(
    ("txt", "message"),
    [
        (b"one", "Failed to parse rewards from text file /logs/verifier/reward.txt"),
        (b" \n", "Failed to parse rewards from text file /logs/verifier/reward.txt"),
        (b"1 2", "Failed to parse rewards from text file /logs/verifier/reward.txt"),
        (b"\xff", "Failed to parse rewards from text file /logs/verifier/reward.txt"),
        (b"inf", "Non-finite reward inf in text file /logs/verifier/reward.txt"),
        (b"nan\n", "Non-finite reward nan in text file /logs/verifier/reward.txt"),
    ],
)
def test_invalid_txt(txt: bytes, message: str) -> None:
    with pytest.raises(RewardFileInvalid) as info:
        parse_rewards(None, txt)
    assert str(info.value) == message


def test_error_classes_share_a_base() -> None:
    for cls in (RewardFileMissing, RewardFileEmpty, RewardFileInvalid):
        assert issubclass(cls, RewardFileError)
    assert len({RewardFileMissing, RewardFileEmpty, RewardFileInvalid}) == 3


# ---------------------------------------------------------------- aggregation


def test_mean_metric_counts_missing_rewards_as_zero():
    assert aggregate_mean([{"reward": 1.0}, None, {"reward": 0.5}]) == {"mean": 0.5}
    assert aggregate_mean([{"a": 1.0, "b": 0.0}, {"a": 0.0}]) == {"a": 0.5, "b": 0.0}
    assert aggregate_mean([]) == {"mean": 0.0}


def test_multi_step_aggregation_final_and_mean():
    steps = [{"reward": 1.0, "x": 1.0}, None, {"reward": 0.0}]
    assert aggregate_steps("final", steps) == {"reward": 0.0}
    assert aggregate_steps("final", [{"reward": 1.0}, None]) is None  # the last had none
    assert aggregate_steps("mean", steps) == {"reward": 0.5, "x": 0.5}
    assert aggregate_steps("mean", [None, None]) is None
    assert aggregate_steps("mean", []) is None


def test_min_reward_per_key_and_missing_keys():
    assert below_min_reward({"reward": 0.5}, None) is None
    assert below_min_reward({"reward": 0.5}, 0.5) is None
    assert below_min_reward({"reward": 0.4}, 0.5) == "reward 0.4 < min_reward 0.5"
    assert below_min_reward({"a": 1.0}, {"a": 1.0, "b": 0.0}) == "b missing < min_reward 0"


def test_a_reward_json_nested_thousands_deep_is_invalid_not_a_recursion_error() -> None:
    deep = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
    with pytest.raises(RewardFileInvalid, match="nested too deeply"):
        parse_rewards(deep, None)
