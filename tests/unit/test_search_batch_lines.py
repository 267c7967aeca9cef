"""One line of `clawgate memory search --batch FILE.jsonl`: what is accepted, and what each mistake says."""

from __future__ import annotations

import pytest

from gateway.cli.search import BatchQuery, parse_batch_line


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"user": "alice", "query": "tea", "limit": 3}', BatchQuery("alice", "tea", 3)),
        ('{"user": "alice", "query": "tea"}', BatchQuery("alice", "tea", 7)),  # the --limit default
        ('{"user": " bob ", "query": "  tea  ", "limit": 50}', BatchQuery("bob", "  tea  ", 50)),
        ('{"user": "bob", "query": "tea", "expected": ["mem-1"]}', BatchQuery("bob", "tea", 7)),  # extra: ignored
        (b'{"user": "b\xc3\xa9a", "query": "th\xc3\xa9"}', BatchQuery("béa", "thé", 7)),
    ],
)
def test_good_lines(line: str | bytes, expected: BatchQuery) -> None:
    assert parse_batch_line(line, 7) == expected


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("{not json", "not JSON"),
        (b"\xff\xfe{}", "not UTF-8 text"),
        ('["alice", "tea"]', "expected a JSON object"),
        ('{"query": "tea"}', "`user` (a non-empty string, the user id) is required"),
        ('{"user": 42, "query": "tea"}', "`user` (a non-empty string"),
        ('{"user": "alice"}', "`query` (a non-empty string) is required"),
        ('{"user": "alice", "query": "   "}', "`query` (a non-empty string) is required"),
        ('{"user": "alice", "query": "tea", "limit": 0}', "`limit` must be a whole number from 1 to 50 (got 0)"),
        ('{"user": "alice", "query": "tea", "limit": -2}', "(got -2)"),
        ('{"user": "alice", "query": "tea", "limit": 51}', "(got 51)"),
        ('{"user": "alice", "query": "tea", "limit": 2.5}', "(got 2.5)"),
        ('{"user": "alice", "query": "tea", "limit": "3"}', '(got "3")'),
        ('{"user": "alice", "query": "tea", "limit": true}', "(got true)"),
        ('{"user": "alice", "query": "tea", "limit": null}', "(got null)"),
    ],
)
def test_bad_lines_say_what_is_wrong(line: str | bytes, error: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_batch_line(line, 7)
    assert error in str(caught.value)
