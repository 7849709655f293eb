"""Harbor's mean and pass@k against golden values computed with harbor 0.25.0's own
`metrics/base.py` (aggregate_reward_dicts) and `utils/pass_at_k.py` on the same rewards."""

from __future__ import annotations

import pytest

from shipyard.taskformat.metrics import (
    aggregate_mean,
    aggregate_rewards,
    eligible_k,
    harbor_sum,
    pass_at_k,
)


def _by_task(scenario: dict[str, list[float | None]]) -> dict[str, list[dict | None]]:
    """Rewards grouped by task in the order Harbor sees trials (attempt-major)."""
    attempts = len(next(iter(scenario.values())))
    out: dict[str, list[dict | None]] = {}
    for a in range(attempts):
        for task, values in scenario.items():
            v = values[a]
            out.setdefault(task, []).append(None if v is None else {"reward": v})
    return out


MIXED = {"t1": [1, 1, 0, None, 1], "t2": [0, 0, 0, 0, 0], "t3": [1, None, 0, 0, 1],
         "t4": [1, 1, 1, 1, 1]}
TEN = {"u1": [1, 0, 0, 0, 0, 0, 0, 0, 0, 0], "u2": [1, 1, 1, 1, 1, 1, 1, 0, 0, 0],
       "u3": [0] * 10}


def test_pass_at_k_mixed_rewards_with_missing_and_n_minus_c_below_k() -> None:
    # Harbor: {2: 0.65, 4: 0.75, 5: 0.75}; t1 has n-c=2 < 4 and t4 n-c=0.
    assert pass_at_k(_by_task(MIXED)) == pytest.approx({2: 0.65, 4: 0.75, 5: 0.75}, abs=1e-12)


def test_pass_at_k_ten_attempts_every_eligible_k() -> None:
    golden = {2: 0.37777777777777777, 4: 0.4666666666666666, 5: 0.5, 8: 0.6,
              10: 0.6666666666666666}
    assert pass_at_k(_by_task(TEN)) == pytest.approx(golden, abs=1e-12)


def test_pass_at_k_uses_the_fewest_attempts_of_any_task() -> None:
    by_task = {"x": [{"reward": 1}, {"reward": 0}, {"reward": 0}],
               "y": [{"reward": 0}, {"reward": 1}]}
    assert pass_at_k(by_task) == pytest.approx({2: 0.8333333333333334}, abs=1e-12)


def test_pass_at_k_only_for_single_binary_rewards() -> None:
    assert pass_at_k({"x": [{"reward": 0.5}, {"reward": 1}]}) == {}
    assert pass_at_k({"x": [{"a": 1, "b": 0}, {"a": 1, "b": 1}]}) == {}
    assert pass_at_k({"x": [None, None]}) == {2: 0.0}  # missing rewards count as failures
    assert pass_at_k({}) == {}


def test_eligible_k() -> None:
    assert eligible_k(1) == []
    assert eligible_k(5) == [2, 4, 5]
    assert eligible_k(20) == [2, 4, 5, 8, 10, 15, 16, 20]


def test_mean_counts_missing_rewards_as_zero() -> None:
    rewards = [r for rs in _by_task(MIXED).values() for r in rs]
    assert aggregate_rewards(rewards) == {"mean": 0.5}  # Harbor: {'mean': 0.5}


def test_mean_per_key_with_several_reward_keys() -> None:
    multi = [{"a": 1, "b": 0.5}, {"a": 0}, None, {"b": 1}]
    assert aggregate_rewards(multi) == {"a": 0.25, "b": 0.375}  # Harbor's values
    assert aggregate_rewards(multi, "max") == {"a": 1, "b": 1}
    assert aggregate_rewards([{"reward": 2}, None], "sum") == {"sum": 2}


# Python 3.12's sum() (Harbor's) over these, as printed by CPython 3.12.1 (3.11's plain sum
# gives 0.9999999999999999, 0.0, 0.0, 0.6000000000000001, 1.6 and 5.9).
HARBOR_SUMS = [
    ([0.1] * 10, "1.0"),
    ([1e100, 1.0, -1e100], "1.0"),
    ([1e100, 1, -1e100], "0.0"),  # an int after a float adds plainly, as CPython
    ([0, 0.1, 0.2, 0.3], "0.6"),
    ([True, 0.1, 0.2, 0.3], "1.6"),
    ([0.05, 0.7, 0.6, 0.1, 0, 0.1, 0.1, 0.05, 0.9, 0, 0.05, 0.9, 0.6, 0.6, 0,
      0.3, 0, 0.7, 0.15, 0], "5.8999999999999995"),
]


@pytest.mark.parametrize(("values", "expected"), HARBOR_SUMS)
def test_harbor_sum_is_python_312s_sum(values, expected) -> None:
    assert repr(harbor_sum(values)) == expected


def test_harbor_sum_of_ints_stays_an_int() -> None:
    assert harbor_sum([1, 2, True]) == 4 and isinstance(harbor_sum([1, 2]), int)
    assert harbor_sum([]) == 0


def test_pass_at_k_is_harbors_to_the_last_bit() -> None:
    # Harbor 0.25 gives 0.875 here; a plain sum gives 0.8750000000000001.
    by_task = {"t1": [{"r": 0}, {"r": 1}, {"r": 0}, {"r": 1}], "t2": [{"r": 1}] * 4,
               "t3": [{"r": 0}, {"r": 1}, {"r": 1}, {"r": 0}],
               "t4": [{"r": 0}, {"r": 1}, {"r": 0}, {"r": 1}]}
    assert repr(pass_at_k(by_task)[2]) == "0.875"


def test_mean_of_fractional_rewards_is_harbors() -> None:
    rewards = [None, {"reward": 0.1}, {"reward": 0.2}, {"reward": 0.3}, {"reward": 0.7}]
    assert repr(aggregate_mean(rewards)["mean"]) == "0.26"  # Harbor's Mean().compute
