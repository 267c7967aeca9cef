"""JSON from the network: nesting is bounded before the decoder sees it, and every refusal says why."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.http_input import MAX_JSON_DEPTH, BadJson, parse_json, too_deep


def nested(depth: int, open_: str = "[", close: str = "]") -> bytes:
    return (open_ * depth + close * depth).encode()


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"[" * 100_000, "more than 64 levels"),  # Python's decoder would raise RecursionError
        (b'{"a":' * 5_000 + b"1" + b"}" * 5_000, "more than 64 levels"),
        (nested(65), "more than 64 levels"),
        (b"\xff\xfe", "not valid UTF-8"),
        (b"{not json", "not valid JSON"),
        (b"", "not valid JSON"),
    ],
)
def test_bad_json_is_refused_with_its_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(BadJson) as caught:
        parse_json(raw)
    assert reason in str(caught.value)


def test_the_limit_itself_and_brackets_in_strings_are_fine() -> None:
    assert parse_json(nested(MAX_JSON_DEPTH)) is not None
    text = '["' + "[" * 500 + '\\"]]]' + "{" * 300 + '"]'
    assert parse_json(text.encode()) == ["[" * 500 + '"]]]' + "{" * 300]
    assert parse_json('{"frame": 1}', what="the frame") == {"frame": 1}
    with pytest.raises(BadJson, match="the frame nests"):
        parse_json("[" * 70 + "]" * 70, what="the frame")


def test_a_flat_body_full_of_brackets_is_counted_quickly() -> None:
    flat = b"[" + b"[]," * 300_000 + b"[]]"  # 900 KB, two levels deep
    assert not too_deep(flat)
    assert len(parse_json(flat)) == 300_001


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet=st.sampled_from('ab[]{}"\\ é\n')),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=30,
)


def depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    return 0


@given(json_values, st.integers(0, 8))
def test_the_depth_count_agrees_with_the_decoder(value: Any, limit: int) -> None:
    raw = json.dumps(value, ensure_ascii=False).encode()
    assert too_deep(raw, limit) == (depth(value) > limit)
    if depth(value) <= limit:
        assert parse_json(raw, max_depth=limit) == value
