"""Harbor's job metrics, exactly (docs/harbor.md §e.4: `metrics/base.py`, `metrics/mean.py`,
`utils/pass_at_k.py` of harbor 0.25.0): Mean (Harbor's default), Sum, Min, Max and pass@k.
Shared by the Sweep status and `shipyard results`."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

Rewards = Mapping[str, float]
Number = int | float


def harbor_sum(values: Iterable[Number]) -> Number:
    """CPython 3.12's builtin `sum(values)` of ints and floats, bit for bit, on any Python.

    Harbor runs on 3.12, whose `sum()` compensates float additions (Neumaier's improved
    Kahan-Babuska summation); 3.11 adds plainly, which moves the last bit (pass@k 0.875 vs
    0.8750000000000001). As CPython: ints (and bools) first add exactly; the first float is
    added plainly; from then on each float adds with its rounding error kept in `c`, each int
    adds plainly as a double, and `c` joins the sum at the end when it is finite and non-zero.
    """
    items = iter(values)
    exact = 0
    total: float | None = None
    for item in items:
        if isinstance(item, int):
            exact += item
            continue
        total = exact + item
        break
    if total is None:
        return exact
    if type(total) is not float:
        raise TypeError(f"harbor_sum: not a number: {total!r}")
    c = 0.0
    for item in items:
        if type(item) is float:
            t = total + item
            if abs(total) >= abs(item):
                c += (total - t) + item
            else:
                c += (item - t) + total
            total = t
        elif isinstance(item, int):
            total += float(item)
        else:
            raise TypeError(f"harbor_sum: not a number: {item!r}")
    if c and math.isfinite(c):
        total += c
    return total


AGGREGATES: dict[str, Callable[[list[Number]], Number]] = {
    "mean": lambda values: harbor_sum(values) / len(values),
    "sum": harbor_sum,
    "min": min,
    "max": max,
}


def aggregate_rewards(rewards: Sequence[Rewards | None], metric: str = "mean"
                      ) -> dict[str, float]:
    """Harbor's `aggregate_reward_dicts`: a missing reward counts 0; with at most one distinct
    reward key the result is `{metric: agg(values)}`, with more it is one entry per key
    (a key missing from a trial counts 0). No rewards at all: `{metric: 0}` for mean."""
    aggregate = AGGREGATES[metric]
    if not rewards:
        return {metric: 0.0} if metric in ("mean", "sum") else {}
    keys = sorted({key for r in rewards if r is not None for key in r})
    if len(keys) <= 1:  # a missing reward is the int 0, as Harbor's (it decides sum()'s path)
        values = [0 if r is None else next(iter(r.values()), 0) for r in rewards]
        return {metric: aggregate(values)}
    return {key: aggregate([0 if r is None else r.get(key, 0) for r in rewards])
            for key in keys}


def aggregate_mean(rewards: Sequence[Rewards | None]) -> dict[str, float]:
    """Harbor's default job metric (Mean)."""
    return aggregate_rewards(rewards, "mean")


def single_binary(rewards: Rewards | None) -> int | None:
    """The 0/1 success Harbor's pass@k counts for one trial (None → 0), or None when the
    rewards are not one 0/1 value (then pass@k is not computed)."""
    if rewards is None:
        return 0
    if len(rewards) != 1:
        return None
    value = next(iter(rewards.values()))
    if isinstance(value, bool) or not isinstance(value, int | float) or value not in (0, 1):
        return None
    return int(value)


def eligible_k(max_k: int) -> list[int]:
    """Powers of 2 from 2 and multiples of 5, each at most `max_k`."""
    ks: set[int] = set()
    k = 2
    while k <= max_k:
        ks.add(k)
        k *= 2
    k = 5
    while k <= max_k:
        ks.add(k)
        k += 5
    return sorted(ks)


def pass_at_k_for_task(n: int, c: int, k: int) -> float:
    """The unbiased estimator 1 - C(n-c, k)/C(n, k), as a product; 1 when n - c < k."""
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(k):
        product *= (n - c - i) / (n - i)
    return 1.0 - product


def pass_at_k(by_task: Mapping[str, Sequence[Rewards | None]]) -> dict[int, float]:
    """Harbor's pass@k for one eval key: trials' rewards grouped by task (insertion order is
    the order Harbor would sum in). Empty unless every trial's rewards are one 0/1 value."""
    successes: dict[str, list[int]] = {}
    for task, rewards in by_task.items():
        for r in rewards:
            value = single_binary(r)
            if value is None:
                return {}
            successes.setdefault(task, []).append(value)
    if not successes:
        return {}
    ks = eligible_k(min(len(s) for s in successes.values()))
    return {k: harbor_sum(pass_at_k_for_task(len(s), sum(s), k) for s in successes.values())
            / len(successes) for k in ks}
