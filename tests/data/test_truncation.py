"""Truncation modes with the verl test vectors (ANCHORS.md §4)."""

from __future__ import annotations

import pytest

from verifiers.data import TRUNCATION_MODES, truncate
from verifiers.errors import ConfigError

TOKENS = list(range(1, 11))


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("left", [7, 8, 9, 10]), ("right", [1, 2, 3, 4]), ("middle", [1, 2, 9, 10])],
)
def test_anchor_vectors(mode: str, expected: list[int]) -> None:
    assert truncate(TOKENS, 4, mode) == expected  # type: ignore[arg-type]


def test_middle_odd_limit_keeps_more_of_the_end() -> None:
    # first L//2 = 2, last L - L//2 = 3
    assert truncate(TOKENS, 5, "middle") == [1, 2, 8, 9, 10]
    assert truncate(TOKENS, 1, "middle") == [10]


@pytest.mark.parametrize("mode", TRUNCATION_MODES)
def test_sequences_that_fit_are_unchanged_in_every_mode(mode: str) -> None:
    assert truncate(TOKENS, 10, mode) == TOKENS  # type: ignore[arg-type]
    assert truncate([], 3, mode) == []  # type: ignore[arg-type]


def test_result_is_a_new_list() -> None:
    out = truncate(TOKENS, 20, "left")
    out.append(99)
    assert TOKENS[-1] == 10


def test_error_mode_names_length_limit_and_fix() -> None:
    with pytest.raises(ConfigError) as info:
        truncate(TOKENS, 4, "error")
    msg = str(info.value)
    assert "10 tokens" in msg and "4 tokens" in msg
    assert "filter_overlong" in msg and "'left'" in msg


def test_bad_arguments_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown truncation mode 'start'"):
        truncate(TOKENS, 4, "start")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="positive integer"):
        truncate(TOKENS, 0, "left")
