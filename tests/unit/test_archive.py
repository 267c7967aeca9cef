"""The session archive's search on SQLite (FTS5 with stemming and bm25) and on PostgreSQL (its
full-text search, ts_rank), the LIKE fallback other databases use, who may see what, and free text
that must never become syntax."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete, insert
from sqlalchemy.engine import Connection

import memory.archive.fulltext
import memory.archive.fulltext_pg
from gateway.core.events import utcnow
from memory.archive.fulltext import (
    CJK_CHARS,
    ELLIPSIS,
    SNIPPET_CHARS,
    fts_expression,
    informative_terms,
    make_snippet,
    query_terms,
    split_cjk,
)
from memory.archive.fulltext_pg import PgWords, pg_words_for
from memory.archive.search import search_in, search_like
from memory.archive.store import MAX_LIMIT, ArchiveStore, threads_in
from memory.store.schema import archived_messages, sessions
from memory.store.storage import Storage
from tests.postgres import BACKENDS, database_url, fresh_database_url

FILLER = [
    "the weather was lovely in the garden today",
    "please remind me to call the plumber",
    "I bought new shoes for the hiking trip",
    "the cat knocked a glass off the table",
    "we watched a film about octopuses",
    "tomorrow the train leaves at seven",
]


class Archive:
    """A migrated database with helpers to add sessions and archived messages directly."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.store = ArchiveStore(storage.db)
        self._next_id = 1

    async def session(
        self, key: str, user_id: str | None, *, audience: str = "personal", excluded: bool = False
    ) -> int:
        row = {
            "key": key,
            "agent": "main",
            "user_id": user_id,
            "created_at": utcnow(),
            "message_count": 0,
            "token_count": 0,
            "audience": audience,
            "memory_excluded": excluded,
        }
        return await self.storage.db.write(_insert_session, row)

    async def add(self, session_id: int, *contents: str, role: str = "user", author: str | None = None) -> list[int]:
        now = utcnow()
        rows: list[dict[str, Any]] = []
        for content in contents:
            rows.append(
                {
                    "id": self._next_id,
                    "session_id": session_id,
                    "role": role,
                    "content": content,
                    "author": author,
                    "tokens": len(content) // 4,
                    "created_at": now - timedelta(minutes=10) + timedelta(seconds=self._next_id),
                    "archived_at": now,
                    "reason": "summarized",
                }
            )
            self._next_id += 1
        await self.storage.db.write(_insert_archived, rows)
        return [r["id"] for r in rows]

    async def ids(self, query: str, **kwargs: Any) -> list[int]:
        return [h.id for h in await self.store.search(query, **kwargs)]


def _insert_session(conn: Connection, row: dict[str, Any]) -> int:
    return int(conn.execute(insert(sessions).values(row).returning(sessions.c.id)).scalar_one())


def _insert_archived(conn: Connection, rows: list[dict[str, Any]]) -> None:
    conn.execute(insert(archived_messages), rows)


def _delete_archived(conn: Connection, message_id: int) -> None:
    conn.execute(delete(archived_messages).where(archived_messages.c.id == message_id))


@pytest.fixture(params=BACKENDS)
async def archive(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Archive]:
    storage = await Storage.open(database_url(request.param, tmp_path))
    try:
        yield Archive(storage)
    finally:
        await storage.close()


@pytest.fixture
async def filled(archive: Archive) -> Archive:
    """Ordinary chatter, so that bm25 has a corpus in which the searched words are rare."""
    sid = await archive.session("web:filler", "filler")
    await archive.add(sid, *FILLER)
    return archive


# --- the pure parts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "terms"),
    [
        ("What did we decide about the Budget meeting?", ["decide", "budget", "meeting"]),
        ("budget BUDGET budget", ["budget"]),
        ("what is it", ["what", "is", "it"]),  # only stop words: search them anyway
        ("snake_case-name", ["snake", "case", "name"]),
        ("", []),
        ("   \n\t ", []),
        ("?!… -- ** ()", []),
        ("Café 会议 ünïcode", ["café", "会议", "ünïcode"]),
    ],
)
def test_query_terms(query: str, terms: list[str]) -> None:
    assert query_terms(query) == terms


def test_fts_expression_quotes_every_term() -> None:
    assert fts_expression(["budget", "meeting"]) == '"budget" OR "meeting"'
    assert fts_expression(['a"b']) == '"a""b"'


def test_snippet_of_a_short_message_is_the_message() -> None:
    assert make_snippet("hello\n\n  world") == "hello world"


def test_snippet_is_cut_around_the_match_and_marked() -> None:
    content = "word " * 200 + "NEEDLE in the middle " + "tail " * 200
    snippet = make_snippet(content, content.index("NEEDLE"))
    assert len(snippet) <= SNIPPET_CHARS
    assert snippet.startswith(ELLIPSIS) and snippet.endswith(ELLIPSIS)
    assert "NEEDLE in the middle" in snippet
    head = make_snippet(content)
    assert not head.startswith(ELLIPSIS) and head.endswith(ELLIPSIS) and head.startswith("word word")
    end = make_snippet(content, len(content) - 3)
    assert end.startswith(ELLIPSIS) and not end.endswith(ELLIPSIS)


@given(st.text(max_size=2000), st.integers(min_value=-10, max_value=3000))
def test_snippet_never_exceeds_its_width(content: str, at: int) -> None:
    snippet = make_snippet(content, at)
    assert len(snippet) <= SNIPPET_CHARS
    if len(content) <= SNIPPET_CHARS:
        assert ELLIPSIS not in snippet or ELLIPSIS in content


# --- FTS5 search ---------------------------------------------------------------------------------


async def test_a_multi_word_question_finds_a_message_with_one_of_its_words(filled: Archive) -> None:
    sid = await filled.session("web:alice", "alice")
    [budget] = await filled.add(sid, "The quarterly budget was approved by finance.")
    assert await filled.ids("what did we decide about the budget for the offsite?") == [budget]


async def test_stemming_finds_other_forms_of_a_word(filled: Archive) -> None:
    sid = await filled.session("web:alice", "alice")
    runs, run = await filled.add(sid, "She runs every morning before work.", "We should run the migration tonight.")
    assert set(await filled.ids("running")) == {runs, run}


async def test_more_matching_words_rank_first(filled: Archive) -> None:
    sid = await filled.session("web:alice", "alice")
    one, both, other = await filled.add(
        sid,
        "The budget spreadsheet is on the shared drive.",
        "At the budget meeting we agreed on the offsite venue.",
        "The meeting room was cold.",
    )
    hits = await filled.store.search("budget meeting venue")
    assert hits[0].id == both
    assert {h.id for h in hits} == {one, both, other}
    assert all(h.score > 0 for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


async def test_hits_carry_the_message_and_its_session(filled: Archive) -> None:
    sid = await filled.session("telegram:dm:42", "alice")
    [mid] = await filled.add(sid, "The octopus has three hearts.", role="assistant", author="clawgate")
    [hit] = await filled.store.search("how many hearts")
    assert (hit.id, hit.session_id, hit.session_key, hit.user_id) == (mid, sid, "telegram:dm:42", "alice")
    assert (hit.role, hit.author, hit.content) == ("assistant", "clawgate", "The octopus has three hearts.")
    assert hit.snippet == hit.content
    assert hit.created_at.tzinfo is not None and hit.archived_at.tzinfo is not None


async def test_the_snippet_shows_the_first_stemmed_match(filled: Archive) -> None:
    sid = await filled.session("web:alice", "alice")
    content = "filler " * 150 + "and then the deployments failed twice " + "more " * 150
    await filled.add(sid, content)
    [hit] = await filled.store.search("failing")
    assert hit.content == content
    assert len(hit.snippet) <= SNIPPET_CHARS and hit.snippet.startswith(ELLIPSIS) and hit.snippet.endswith(ELLIPSIS)
    assert "the deployments failed twice" in hit.snippet


async def test_only_user_and_assistant_messages_are_searched(filled: Archive) -> None:
    sid = await filled.session("web:alice", "alice")
    await filled.add(sid, "tool output about zeppelins", role="tool")
    await filled.add(sid, "system note about zeppelins", role="system")
    [said] = await filled.add(sid, "I love zeppelins")
    assert await filled.ids("zeppelins") == [said]


async def test_privacy_of_the_archive(filled: Archive) -> None:
    alice = await filled.session("telegram:dm:1", "alice")
    bob = await filled.session("telegram:dm:2", "bob")
    group = await filled.session("telegram:group:-100", None, audience="team")
    group_by_bob = await filled.session("slack:C1", "bob", audience="team")
    public = await filled.session("discord:lobby", None, audience="public")
    excluded = await filled.session("telegram:dm:1", "alice", excluded=True)
    [a] = await filled.add(alice, "alice's secret password hint is marmalade")
    [b] = await filled.add(bob, "bob's secret marmalade recipe")
    [g] = await filled.add(group, "the team prefers marmalade on Fridays")
    [gb] = await filled.add(group_by_bob, "bob told the slack channel about marmalade")
    await filled.add(public, "public marmalade chatter")
    await filled.add(excluded, "alice's forgotten marmalade session")

    assert await filled.ids("marmalade", user_id="alice") == [a]
    assert set(await filled.ids("marmalade", user_id="bob")) == {gb, b}
    assert set(await filled.ids("marmalade", user_id="alice", session_keys=["telegram:group:-100"])) == {a, g}
    assert await filled.ids("marmalade", session_keys=["telegram:group:-100"]) == [g]
    # A public conversation stays out even when it is the current one.
    assert await filled.ids("marmalade", user_id="alice", session_keys=["discord:lobby"]) == [a]
    # The operator sees every session, but never excluded or public ones.
    assert set(await filled.ids("marmalade")) == {a, b, g, gb}
    assert await filled.ids("marmalade", user_id="carol") == []
    # Recall's search (no snippets, a prebuilt statement) sees exactly what the search command sees.
    for asker in (
        {"user_id": "alice"},
        {"user_id": "bob"},
        {"user_id": "alice", "session_keys": ["telegram:group:-100"]},
        {"session_keys": ["telegram:group:-100"]},
        {"user_id": "alice", "session_keys": ["discord:lobby"]},
        {},
        {"user_id": "carol"},
    ):
        plain = await filled.storage.db.read(
            lambda conn, kw=asker: search_in(
                conn, query_terms("marmalade"), kw.get("user_id"), kw.get("session_keys", ()), 10, snippets=False
            )
        )
        assert {h.id for h in plain} == set(await filled.ids("marmalade", **asker)), asker


HOSTILE = [
    '"',
    '""',
    '"unbalanced',
    "*",
    "budget*",
    "NEAR(",
    "NEAR(budget meeting, 2)",
    "AND OR NOT",
    "budget AND",
    "NOT budget",
    "content:budget",
    "col:",
    "{content}: budget",
    "((budget",
    "budget))",
    "^budget",
    "budget + meeting",
    "🎉🎉 party 🎉",
    "会议记录",
    "x" * 10_000,
    "budget meeting " * 700,
    "\x00 budget \x00",
    "e\u0301te\u0301",
]


async def test_hostile_queries_never_raise(filled: Archive) -> None:
    sid = await filled.session("web:alice", "alice")
    await filled.add(sid, "budget meeting notes 会议记录 party")
    for query in HOSTILE:
        hits = await filled.store.search(query, user_id="alice")
        assert len(hits) <= MAX_LIMIT, query


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.text(max_size=300))
@example(query='" OR "')
@example(query="NEAR(a b")
async def test_arbitrary_text_never_raises(filled: Archive, query: str) -> None:
    hits = await filled.store.search(query, user_id="filler")
    assert all(h.user_id == "filler" for h in hits)


async def test_a_query_without_words_does_not_touch_the_database(archive: Archive) -> None:
    await archive.storage.close()  # any database work would now raise DatabaseClosed
    for query in ("", "   ", "\n\t", "?!", "-- ** ()", "🎉"):
        assert await archive.store.search(query) == []


# PostgreSQL's English configuration leaves stop words out of the stored words, as it does for
# records (migration 0010): a question of stop words alone finds nothing there.
@pytest.mark.parametrize("archive", ["sqlite"], indirect=True)
async def test_a_query_of_stop_words_still_searches(filled: Archive) -> None:
    sid = await filled.session("web:alice", "alice")
    [mid] = await filled.add(sid, "What is it?")
    assert mid in await filled.ids("what is it")


async def test_limit_is_capped(filled: Archive) -> None:
    sid = await filled.session("web:alice", "alice")
    await filled.add(sid, *(f"lighthouse note {i}" for i in range(MAX_LIMIT + 10)))
    assert len(await filled.ids("lighthouse", limit=0)) == 1
    assert len(await filled.ids("lighthouse", limit=3)) == 3
    assert len(await filled.ids("lighthouse", limit=1000)) == MAX_LIMIT


async def test_equal_scores_put_the_newest_first(filled: Archive) -> None:
    sid = await filled.session("web:alice", "alice")
    first, second = await filled.add(sid, "lighthouse", "lighthouse")
    assert await filled.ids("lighthouse") == [second, first]


async def test_a_deleted_message_leaves_the_index(filled: Archive) -> None:
    sid = await filled.session("web:alice", "alice")
    gone, kept = await filled.add(sid, "the lighthouse keeper", "another lighthouse")
    await filled.storage.db.write(_delete_archived, gone)
    assert await filled.ids("lighthouse keeper") == [kept]


async def test_for_session_and_count(filled: Archive) -> None:
    sid = await filled.session("web:alice", "alice")
    other = await filled.session("web:bob", "bob")
    ids = await filled.add(sid, "one", "two", "three")
    await filled.add(sid, "a tool result", role="tool")
    await filled.add(other, "elsewhere")
    listed = await filled.store.for_session(sid)
    assert [h.id for h in listed] == [*ids, ids[-1] + 1]
    assert [h.role for h in listed] == ["user", "user", "user", "tool"]
    assert [h.id for h in await filled.store.for_session(sid, limit=2)] == ids[:2]
    assert await filled.store.count(sid) == 4
    assert await filled.store.count() == 4 + 1 + len(FILLER)


# --- the LIKE fallback ---------------------------------------------------------------------------


async def test_like_fallback_scores_by_matched_terms(filled: Archive) -> None:
    sid = await filled.session("web:alice", "alice")
    bob = await filled.session("web:bob", "bob")
    hidden = await filled.session("web:alice", "alice", excluded=True)
    both, one_old, one_new = await filled.add(
        sid, "Budget for the MEETING room", "the budget is tight", "budget approved, long content " * 20
    )
    [theirs] = await filled.add(bob, "bob's budget meeting")
    await filled.add(hidden, "hidden budget meeting")
    await filled.add(sid, "100% of the snake_case things")  # LIKE wildcards in content are just text

    hits = await filled.storage.db.read(search_like, query_terms("what about the budget meeting"), "alice", (), 10)
    assert [h.id for h in hits][:3] == [both, one_new, one_old]
    assert [h.score for h in hits][:3] == [2.0, 1.0, 1.0]
    assert theirs not in {h.id for h in hits}
    assert all(len(h.snippet) <= SNIPPET_CHARS for h in hits)
    assert "budget" in hits[1].snippet.lower()

    everyone = await filled.storage.db.read(search_like, ["meeting"], None, (), 10)
    assert {h.id for h in everyone} == {both, theirs}
    wildcard = await filled.storage.db.read(search_like, ["%", "_"], None, (), 10)
    assert [h.content for h in wildcard] == ["100% of the snake_case things"]


# --- CJK: the trigram index beside the porter one -----------------------------------------------


def trigrams_consistent(conn: Connection, table: str, key: str) -> None:
    """cjk_consistent on SQLite; PostgreSQL has no separate trigram index to disagree with."""
    if conn.dialect.name == "sqlite":
        cjk_consistent(conn, table, key)


def cjk_consistent(conn: Connection, table: str, key: str) -> None:
    """The trigram index of `table` is sound (FTS5's own check raises "database disk image is
    malformed" otherwise) and holds exactly the texts with CJK in them."""
    conn.exec_driver_sql(f"INSERT INTO {table}_cjk({table}_cjk) VALUES ('integrity-check')")
    indexed = {r[0] for r in conn.exec_driver_sql(f"SELECT id FROM {table}_cjk_docsize")}
    with_cjk = {r[0] for r in conn.exec_driver_sql(f"SELECT {key} FROM {table} WHERE content GLOB ?", (CJK_GLOB,))}
    assert indexed == with_cjk


CJK_GLOB = f"*[{CJK_CHARS}]*"


@pytest.mark.parametrize(
    ("terms", "words", "runs"),
    [
        (["budget", "meeting"], ["budget", "meeting"], []),
        (["我在tokyo工作"], ["tokyo"], ["我在", "工作"]),
        (["东京", "tokyo", "东京"], ["tokyo"], ["东京"]),
        (["the東京"], [], ["東京"]),  # a stop word left over from a split is dropped
        (["서울에서"], [], ["서울에서"]),
        (["ｶﾀｶﾅ"], [], ["ｶﾀｶﾅ"]),  # half-width katakana
    ],
)
def test_split_cjk(terms: list[str], words: list[str], runs: list[str]) -> None:
    assert split_cjk(terms) == (words, runs)


async def test_cjk_messages_are_found_by_a_word_inside_a_run(filled: Archive) -> None:
    sid = await filled.session("web:alice", "alice")
    tokyo, coffee, seoul, mixed = await filled.add(
        sid, "我住在东京已经三年了", "私は毎朝コーヒーを飲みます", "서울에서 한국어를 공부해요", "我在Tokyo工作"
    )
    for query, expected in [
        ("东京", [tokyo]),
        ("住在东京", [tokyo]),
        ("コーヒー", [coffee]),
        ("毎朝", [coffee]),
        ("한국어", [seoul]),
        ("工作", [mixed]),
        ("Tokyo", [mixed]),
        ("北京", []),
    ]:
        assert await filled.ids(query, user_id="alice") == expected, query
        plain = await filled.storage.db.read(
            lambda conn, q=query: search_in(conn, query_terms(q), "alice", (), 10, snippets=False)
        )
        assert [h.id for h in plain] == expected, query
    [hit] = await filled.store.search("毎朝", user_id="alice")
    assert "毎朝" in hit.snippet and hit.score > 0
    assert set(await filled.ids("东京 or Tokyo, plumber", user_id="alice")) == {tokyo, mixed}
    assert await filled.ids("plumber", user_id="filler") != []  # English as before


async def test_cjk_search_keeps_the_privacy_rules(filled: Archive) -> None:
    a = await filled.session("web:alice", "alice")
    b = await filled.session("web:bob", "bob")
    hidden = await filled.session("web:alice-private", "alice", excluded=True)
    lobby = await filled.session("discord:lobby", None, audience="public")
    [mine] = await filled.add(a, "我住在东京")
    [bobs] = await filled.add(b, "我住在东京的公寓")
    await filled.add(hidden, "我住在东京的秘密")
    await filled.add(lobby, "我住在东京的大厅")
    await filled.add(a, "东京的系统提示", role="system")
    for query in ("东京", "住在东京"):
        assert await filled.ids(query, user_id="alice") == [mine]
        assert await filled.ids(query, user_id="bob") == [bobs]
        assert await filled.ids(query, user_id="alice", session_keys=["discord:lobby"]) == [mine]
        assert set(await filled.ids(query)) == {mine, bobs}
        assert await filled.ids(query, user_id="carol") == []


async def test_deleting_or_editing_a_cjk_message_leaves_no_stale_hit(filled: Archive) -> None:
    sid = await filled.session("web:alice", "alice")
    first, second = await filled.add(sid, "我住在东京", "the lighthouse is white")

    def edit(conn: Connection, message_id: int, content: str) -> None:
        conn.execute(archived_messages.update().where(archived_messages.c.id == message_id).values(content=content))

    await filled.storage.db.write(edit, first, "我住在大阪")
    await filled.storage.db.write(edit, second, "the lighthouse in 大阪")
    await filled.storage.db.read(trigrams_consistent, "archived_messages", "id")
    assert await filled.ids("东京", user_id="alice") == []
    assert set(await filled.ids("大阪", user_id="alice")) == {first, second}
    await filled.storage.db.write(edit, second, "the lighthouse is white")
    await filled.storage.db.write(_delete_archived, first)
    await filled.storage.db.read(trigrams_consistent, "archived_messages", "id")
    assert await filled.ids("大阪", user_id="alice") == []
    assert await filled.ids("lighthouse", user_id="alice") == [second]


async def test_a_thread_reaches_its_neighbours_in_its_own_session_only(archive: Archive) -> None:
    first = await archive.session("web:a", "alice")
    other = await archive.session("web:b", "alice")
    before = await archive.add(first, "one", "two")
    await archive.add(first, "a tool ran", role="tool")  # never searched, so never a neighbour
    hit, after = await archive.add(first, "three", "four")
    elsewhere = await archive.add(other, "five")

    async def threads(ids: list[int], reach: int, user: str | None = "alice", keys: Sequence[str] = ()) -> Any:
        found = await archive.storage.db.read(threads_in, ids, reach, user, list(keys))
        out: dict[int, list[int]] = {}
        for n in found:
            out.setdefault(n.hit, [n.hit]).append(n.id)
        return {h: sorted(thread) for h, thread in out.items()}, found

    near, rows = await threads([hit, elsewhere[0]], 1)
    assert near == {hit: [before[1], hit, after]}  # "five" is alone in its session
    assert {(n.id, n.content, n.session_key) for n in rows} == {(before[1], "two", "web:a"), (after, "four", "web:a")}
    assert all(n.created_at.tzinfo is not None for n in rows)
    assert (await threads([hit], 5))[0] == {hit: [*before, hit, after]}  # up to five each side: what the session has
    assert (await threads([hit], 0))[0] == {}
    # Behind the archive's rules: another person sees nothing of Alice's, the conversation's key shows it.
    assert (await threads([hit], 1, user="bob"))[0] == {}
    assert (await threads([hit], 1, user="bob", keys=["web:a"]))[0] == {hit: [before[1], hit, after]}


async def test_sqlite_leaves_out_common_words_once_a_table_is_large(tmp_path: Path) -> None:
    storage = await Storage.open(f"sqlite:///{tmp_path}/a.db")
    try:
        archive = Archive(storage)
        sid = await archive.session("web:bench", "alice")
        await archive.add(sid, "the lighthouse benchmark message", *[f"benchmark message {n}" for n in range(998)])

        def informative(conn: Connection, words: list[str]) -> list[str]:
            return informative_terms(conn, "archived_messages_fts", words)

        # 999 texts: ranking every match is cheaper than counting the words, so all of them stay.
        assert await storage.db.read(informative, ["benchmark", "message", "lighthouse"]) == [
            "benchmark",
            "message",
            "lighthouse",
        ]
        await archive.add(sid, "benchmark message 999")
        memory.archive.fulltext._COUNTS.clear()  # counts are kept a minute
        assert await storage.db.read(informative, ["benchmark", "message", "lighthouse"]) == ["lighthouse"]
        assert await storage.db.read(informative, ["benchmark", "message"]) == ["benchmark"]  # the rarest stays
        assert await archive.ids("lighthouse message", user_id="alice") == [1]
    finally:
        await storage.close()


# --- PostgreSQL: common words left out by its own statistics --------------------------------------


async def test_postgresql_leaves_out_common_words_and_matches_the_rarest(monkeypatch: pytest.MonkeyPatch) -> None:
    storage = await Storage.open(fresh_database_url())
    try:
        archive = Archive(storage)
        sid = await archive.session("web:alice", "alice")
        await archive.add(sid, *(f"the weather today, note {i}" for i in range(150)))
        await archive.add(sid, *(f"weather and garden, note {i}" for i in range(100)))
        kites = await archive.add(sid, *(f"a kite in the weather, note {i}" for i in range(20)))
        [zeppelin] = await archive.add(sid, "a zeppelin over the garden")
        await storage.db.write(lambda conn: conn.exec_driver_sql("ANALYZE archived_messages"))

        async def asked(words: list[str]) -> PgWords:
            return await storage.db.read(lambda conn: pg_words_for(conn, "archived_messages", words))

        # weather is in every message, garden in 37 %: left out while a rarer word remains.
        assert await asked(["weather", "garden", "zeppelin", "kites"]) == PgWords(
            "zeppelin | kites", "zeppelin | kites"
        )
        assert await asked(["weather", "garden"]) == PgWords("garden", "garden")  # the rarest, always
        assert await asked(["her", "zeppelin"]) == PgWords("zeppelin", "zeppelin")  # a stop word there
        assert await asked(["weather"]) == PgWords("weather", "weather")  # one word: nothing to choose
        # Only the rarest words match, as many as the budget of rows allows; all rank.
        monkeypatch.setattr(memory.archive.fulltext_pg, "PG_MATCH_BUDGET", 10)
        assert await asked(["kites", "zeppelin"]) == PgWords("zeppelin", "zeppelin | kites")
        assert await archive.ids("zeppelin kites weather", user_id="alice") == [zeppelin]
        monkeypatch.setattr(memory.archive.fulltext_pg, "PG_MATCH_BUDGET", 5_000)
        found = await archive.ids("zeppelin kites weather", user_id="alice", limit=50)
        assert set(found) == {zeppelin, *kites}
    finally:
        await storage.close()


async def test_without_statistics_every_word_counts() -> None:
    storage = await Storage.open(fresh_database_url())
    try:
        found = await storage.db.read(lambda conn: pg_words_for(conn, "archived_messages", ["weather", "garden"]))
        assert found == PgWords("weather | garden", "weather | garden")
    finally:
        await storage.close()
