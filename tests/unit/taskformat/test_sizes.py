"""Legacy size strings: ``<float>G|M|K`` (docs/harbor.md §a.2)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shipyard.taskformat import parse_size_to_mb

FACTOR = {"g": 1024.0, "m": 1.0, "k": 1 / 1024}


@pytest.mark.parametrize(
    ("text", "mb"),
    [
        ("1G", 1024),
        ("2g", 2048),
        ("0.5G", 512),
        ("512M", 512),
        ("1.9M", 1),
        ("2048K", 2),
        ("1023k", 0),
        (" 4G ", 4096),
        ("1e1M", 10),
        ("-1G", -1024),
    ],
)
def test_examples(text: str, mb: int) -> None:
    assert parse_size_to_mb(text) == mb


@pytest.mark.parametrize("text", ["", "1", "1GB", "1T", "1 G B", "10 gb", "G1"])
def test_unknown_suffix(text: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_size_to_mb(text)
    shown = text.strip().upper()
    assert (
        str(info.value) == f"Invalid size format: {shown}. Expected format like '1G', '512M', etc."
    )


@pytest.mark.parametrize("text", ["G", "abcM", "1,5G", "--1K"])
def test_unparsable_number_raises_floats_error(text: str) -> None:
    with pytest.raises(ValueError, match="could not convert string to float"):
        parse_size_to_mb(text)


@pytest.mark.parametrize("text", ["infG", "nanM", "1e400K"])
def test_non_finite_numbers_are_format_errors_not_crashes(text: str) -> None:
    with pytest.raises(ValueError, match="Invalid size format"):
        parse_size_to_mb(text)


@given(
    st.floats(min_value=0, max_value=1e9, allow_nan=False),
    st.sampled_from("gGmMkK"),
    st.sampled_from(["", " ", "\n"]),
)
def test_value_times_unit_truncated(value: float, unit: str, space: str) -> None:
    text = f"{space}{value!r}{unit}{space}"
    assert parse_size_to_mb(text) == int(value * FACTOR[unit.lower()])


@given(st.integers(min_value=0, max_value=10**6))
def test_units_are_consistent(n: int) -> None:
    assert parse_size_to_mb(f"{n}G") == parse_size_to_mb(f"{n * 1024}M")
    assert parse_size_to_mb(f"{n * 1024}K") == n


@given(st.text(max_size=12))
def test_any_text_parses_to_an_int_or_raises_value_error(text: str) -> None:
    try:
        result = parse_size_to_mb(text)
    except ValueError:
        return
    assert isinstance(result, int)
    assert text.strip()[-1:].upper() in FACTOR.keys() | {"G", "M", "K"}
    assert math.isfinite(result)
