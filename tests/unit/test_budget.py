"""The token estimate and every threshold of the session budget (DESIGN §4), at and around each
boundary."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.config.model import Config
from gateway.session.budget import _budget
from memory.budget import Budget, plan_flush, plan_trim
from memory.tokens import estimate_tokens


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("a", 1),  # four characters a token, rounded up
        ("abcd", 1),
        ("abcde", 2),
        ("hello world!", 3),  # 12 characters
        ("12345", 5),  # a digit is a token
        ("abc 123", 4),  # "abc " -> 1, three digits -> 3
        ("привет", 6),  # Cyrillic letters: one each
        ("Привет, мир", 10),  # 9 letters + ", " -> 1
        ("日本語", 3),  # CJK: one each
        ("こんにちは", 5),  # kana
        ("مرحبا", 5),  # Arabic
        ("Ελλάδα", 6),  # Greek
        ("café", 1),  # Latin with an accent is Latin: four characters a token
        ("naïve résumé", 3),
        ("😀", 1),  # an emoji is not a letter
        ("😀😀😀😀😀", 2),
        ("version 2 of 日本", 6),  # one digit, two CJK, 12 other characters -> 3
        ("abc日本123", 6),  # 2 CJK + 3 digits + "abc" -> 1
    ],
)
def test_token_estimate_table(text: str, tokens: int) -> None:
    assert estimate_tokens(text) == tokens


@given(st.text(max_size=200), st.text(max_size=200))
def test_token_estimate_is_nearly_additive(a: str, b: str) -> None:
    # Running totals add message estimates; each message rounds up at most one partial token.
    assert (
        estimate_tokens(a) + estimate_tokens(b) - 1 <= estimate_tokens(a + b) <= estimate_tokens(a) + estimate_tokens(b)
    )


# -- limits -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_tokens", "messages", "flush", "token_limit", "message_limit"),
    [
        (40_000, 40, 80_000, 40_000, None),  # the defaults
        (60_000, 40, 80_000, 40_000, None),  # never more than half of auto_flush_tokens
        (40_000, 40, 50_000, 25_000, None),
        (1_000, 40, 80_000, 1_000, None),
        (0, 40, 80_000, 40_000, 40),  # message mode; the token cap still holds
        (0, 10, 100, 50, 10),
    ],
)
def test_limits(max_tokens: int, messages: int, flush: int, token_limit: int, message_limit: int | None) -> None:
    b = Budget(max_tokens=max_tokens, max_messages=messages, flush_tokens=flush)
    assert (b.token_limit, b.message_limit) == (token_limit, message_limit)


def test_over_is_strictly_past_the_limit() -> None:
    b = Budget(max_tokens=1000, flush_tokens=80_000)
    assert not b.over(999, 500) and not b.over(1000, 500) and b.over(1001, 1)
    assert not b.twice_over(2000, 1) and b.twice_over(2001, 1)
    m = Budget(max_tokens=0, max_messages=40, flush_tokens=80_000)
    assert not m.over(10, 40) and m.over(10, 41)
    assert not m.twice_over(10, 80) and m.twice_over(10, 81)
    assert m.over(40_001, 2)  # the token cap applies in message mode too


def test_targets_are_60_percent() -> None:
    assert Budget(max_tokens=1000).token_target == 600
    assert Budget(max_tokens=0, max_messages=40).message_target == 24
    assert Budget(max_tokens=0, max_messages=5).message_target == 3


def test_config_maps_to_the_budget() -> None:
    cfg = Config.model_validate(
        {"memory": {"session_memory": {"max_tokens": 0, "messages": 12}, "auto_flush_tokens": 500}}
    )
    assert _budget(cfg) == Budget(max_tokens=0, max_messages=12, flush_tokens=500)
    # flush.threshold_tokens sets the same when auto_flush_tokens is left at its default ...
    cfg = Config.model_validate({"memory": {"flush": {"threshold_tokens": 900}}})
    assert cfg.memory.flush_tokens == 900
    # ... and loses to an explicit auto_flush_tokens.
    cfg = Config.model_validate({"memory": {"auto_flush_tokens": 700, "flush": {"threshold_tokens": 900}}})
    assert cfg.memory.flush_tokens == 700


# -- where to cut -------------------------------------------------------------------------------


def session(*spec: str) -> tuple[list[str], list[int]]:
    """ "u10" = a user message of 10 tokens; a = assistant, c = assistant tool call, t = tool result."""
    names = {"u": "user", "a": "assistant", "c": "assistant", "t": "tool"}
    return [names[s[0]] for s in spec], [int(s[1:]) for s in spec]


def test_trim_keeps_60_percent_from_a_user_message() -> None:
    roles, toks = session("u100", "a100", "u100", "a100", "u100", "a100", "u100", "a100", "u100", "a200")
    b = Budget(max_tokens=1000)  # 1100 tokens: over; the target is 600
    k = plan_trim(roles, toks, b)
    assert roles[k] == "user" and sum(toks[k:]) <= 600
    assert k == 6  # u100 a100 u100 a200 = 500; one more exchange would be 700


def test_trim_never_splits_a_tool_call_from_its_result() -> None:
    roles, toks = session("u50", "a50", "u50", "c50", "t300", "a50", "u50", "a50")
    k = plan_trim(roles, toks, Budget(max_tokens=500))  # 650 tokens; target 300
    assert roles[k] == "user" and k == 6
    # The kept part starts at a user message, so a call and its result stay together (or both go).
    kept = roles[k:]
    assert "tool" not in kept or kept.index("tool") > 0


def test_trim_keeps_at_least_the_newest_exchange() -> None:
    roles, toks = session("u10", "a10", "u10", "c10", "t900")
    k = plan_trim(roles, toks, Budget(max_tokens=500))
    assert k == 2  # the newest exchange alone is over the target: keep it whole


def test_trim_finds_nothing_when_there_is_one_exchange() -> None:
    roles, toks = session("u10", "c10", "t900", "a10")
    assert plan_trim(roles, toks, Budget(max_tokens=500)) == 0


def test_trim_in_message_mode() -> None:
    roles, toks = session(*(["u1", "a1"] * 21))  # 42 messages, limit 40, target 24
    k = plan_trim(roles, toks, Budget(max_tokens=0, max_messages=40))
    assert len(roles) - k == 24 and roles[k] == "user"
    roles, toks = session(*(["u1", "a1", "a1"] * 14))  # 42; a user message every three
    k = plan_trim(roles, toks, Budget(max_tokens=0, max_messages=40))
    assert len(roles) - k <= 24 and roles[k] == "user"


@given(st.lists(st.tuples(st.sampled_from(["user", "assistant", "tool"]), st.integers(0, 500)), max_size=60))
def test_trim_properties(msgs: list[tuple[str, int]]) -> None:
    roles, toks = [r for r, _ in msgs], [t for _, t in msgs]
    b = Budget(max_tokens=1000)
    k = plan_trim(roles, toks, b)
    assert 0 <= k < max(len(roles), 1)
    if k:
        assert roles[k] == "user"
        # Either the kept part fits the target, or it is the newest exchange alone.
        fits = sum(toks[k:]) <= b.token_target
        newest = "user" not in roles[k + 1 :]
        assert fits or newest


def test_flush_only_past_the_threshold() -> None:
    b = Budget(max_tokens=1000, flush_tokens=1000)
    roles, toks = session("u300", "a300", "u200", "a100")  # 900
    assert plan_flush(roles, toks, 100, b) == 0  # exactly 1000: not past it
    assert plan_flush(roles, toks, 101, b) == 2  # keeps u200 a100 + 101 fixed <= 500
    roles, toks = session("u300", "a300", "u300", "a300")
    assert plan_flush(roles, toks, 100, b) == 4  # even the newest exchange does not fit: all of it goes
