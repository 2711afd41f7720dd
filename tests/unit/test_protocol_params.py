"""Integers and booleans in query strings and headers: exactly the spec's grammar, never Python's int()."""

from __future__ import annotations

import pytest

from resilient.protocol.errors import ApiError
from resilient.protocol.params import parse_bool, parse_int

SIGNED = {"minimum": -1, "maximum": 2**53}
LIMIT = {"minimum": 1, "maximum": 100}


@pytest.mark.parametrize(("raw", "expected"), [("0", 0), ("-1", -1), ("7", 7), ("007", 7), ("-0", 0),
                                               (str(2**53), 2**53)])
def test_plain_ascii_digits_are_integers(raw: str, expected: int) -> None:
    assert parse_int(raw, param="starting_after", **SIGNED) == expected


@pytest.mark.parametrize("raw", [
    "", " 5", "5 ", "+5", "1_0", "1e3", "0x10", "1.5", "５", "٥", "१", "5\n", "\n5", "--1", "-", "1-",
    "\x00", "5\x00", "true", "ⅷ", "²",
])
def test_anything_else_is_a_400_of_type_invalid_type(raw: str) -> None:
    with pytest.raises(ApiError) as info:
        parse_int(raw, param="starting_after", **SIGNED)
    assert (info.value.status, info.value.param, info.value.code) == (400, "starting_after", "invalid_type")


@pytest.mark.parametrize("raw", ["-2", str(2**53 + 1), "9" * 21, "9" * 5000])
def test_out_of_range_is_invalid_value(raw: str) -> None:
    with pytest.raises(ApiError) as info:
        parse_int(raw, param="Last-Event-ID", **SIGNED)
    assert (info.value.status, info.value.param, info.value.code) == (400, "Last-Event-ID", "invalid_value")


def test_a_minus_sign_only_where_negative_values_are_allowed() -> None:
    with pytest.raises(ApiError) as info:
        parse_int("-1", param="limit", **LIMIT)
    assert info.value.code == "invalid_type" and info.value.param == "limit"
    with pytest.raises(ApiError) as info:
        parse_int("0", param="limit", **LIMIT)
    assert info.value.code == "invalid_value"
    assert parse_int("100", param="limit", **LIMIT) == 100


def test_booleans_are_exactly_true_or_false() -> None:
    assert parse_bool("true", param="stream") is True
    assert parse_bool("false", param="stream") is False
    for raw in ["", "1", "yes", "True", "TRUE", " true", "true\n", "on"]:
        with pytest.raises(ApiError) as info:
            parse_bool(raw, param="stream")
        assert (info.value.status, info.value.param, info.value.code) == (400, "stream", "invalid_type")
