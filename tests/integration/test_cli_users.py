"""`--user` before any gateway has started, and `--json` that stays JSON while progress is printed.

Users: every subcommand that takes `--user` knows the users config.yaml declares on a data folder no
gateway has opened (its users table empty), with the roles the config gives them over what an older
database says, and the people the gateway met in chat; it writes no user; anyone else is refused with
exit code 2 and the way to find the ids. JSON: what a command prints with `--json` parses, while the
model load, coverage notes and a library's stray print go to standard error.

The entry point runs as a process where the real embedding path matters; the rest go through
`gateway.cli.main` in this process (the function `python -m gateway` calls), as test_cli_review does.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
import yaml

from gateway.cli import main as cli
from gateway.cli.users import declared_user, unknown_user
from gateway.config.load import parse_config
from memory.store.identities import User
from memory.store.storage import Storage
from tests.cli import run_cli
from tests.conftest import config_data
from tests.memories import make_memory
from tests.unit.test_embeddings import FakeEmbeddings

T = TypeVar("T")
# What config_data declares: alice (identity telegram:1 and a token), bob (a token), root (admin, a token),
# and its loopback web channel's anonymous visitor, `local`.
DECLARED = "known from config.yaml: alice, bob, root, local"


def _home(tmp_path: Path, **overrides: Any) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(config_data(tmp_path, None, **overrides)))
    return config


def _with_db(config: Path, work: Callable[[Storage], Awaitable[T]]) -> T:
    """`work` on the config's database, from a test that is not itself async (cli.main runs its own loop)."""

    async def run() -> T:
        storage = await Storage.open(f"sqlite:///{config.parent}/data/clawgate.db")
        try:
            return await work(storage)
        finally:
            await storage.close()

    return asyncio.run(run())


async def _users(storage: Storage) -> list[User]:
    return await storage.identities.users()


def _cli(capsys: pytest.CaptureFixture[str], config: Path, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(["--config", str(config), *args])
    out, err = capsys.readouterr()
    return code, out, err


# -- the pure part --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("users", "web", "asked", "found"),
    [
        ({"alice": {"roles": ["admin"], "identities": ["telegram:1"]}}, None, "alice", ("alice", ("admin",))),
        ({"alice": {"roles": ["user"]}}, None, "bob", None),
        ({"alice": {"roles": ["user"]}}, None, "Alice", None),  # ids are exact, as in chat
        # A loopback web channel's anonymous visitor is a declared user too, as the gateway's start declares it.
        ({}, {"allow_local_anonymous": True, "local_user": "me"}, "me", ("me", ("user",))),
        ({}, {"allow_local_anonymous": False, "local_user": "me"}, "me", None),
    ],
)
def test_declared_user_is_what_the_gateway_declares(
    tmp_path: Path, users: dict[str, Any], web: dict[str, Any] | None, asked: str, found: tuple[str, Any] | None
) -> None:
    data: dict[str, Any] = {"storage": {"data_dir": str(tmp_path)}, "users": users}
    if web is not None:
        data["channels"] = {"web": {"host": "127.0.0.1", "port": 0, **web}}
    config = parse_config(data, "config.yaml")
    user = declared_user(config, asked)
    assert (None if user is None else (user.id, user.roles)) == found
    if user is not None:  # the very entry the gateway writes at start
        assert (user.id, list(user.roles), list(user.identities)) in config.declared_users()


def test_unknown_user_names_the_declared_ids_and_the_owner_of_an_identity(tmp_path: Path) -> None:
    config = parse_config(config_data(tmp_path, None), "config.yaml")
    said = unknown_user(config, " carol ")
    assert said.startswith(f"no user 'carol' ({DECLARED};") and "/whoami" in said and "users:" in said
    assert unknown_user(config, "telegram:1") == "no user 'telegram:1': that is an identity of alice; use --user alice"
    assert "identity of bob; use --user bob" in unknown_user(config, "api:bob")  # a token's identity
    no_web = {"channels": {"web": {"enabled": False}}}
    many = parse_config(no_web | {"users": {f"u{i:02}": {} for i in range(25)}}, "config.yaml")
    assert "u19 and 5 more;" in unknown_user(many, "x") and "u20" not in unknown_user(many, "x")
    assert "config.yaml declares no users;" in unknown_user(parse_config(no_web, "config.yaml"), "x")


# -- --user on a data folder no gateway has opened --------------------------------------------------


async def test_a_declared_user_searches_before_any_gateway_started(tmp_path: Path) -> None:
    config = _home(tmp_path)
    assert not (tmp_path / "data").exists()
    rc, out, err = await run_cli("--config", str(config), "memory", "search", "--user", "alice", "--json", "coffee")
    assert (rc, json.loads(out)) == (0, []), err

    storage = await Storage.open(f"sqlite:///{tmp_path}/data/clawgate.db")
    try:
        mine = await make_memory(storage, "Alice takes her coffee black", "personal:alice", pending=False)
        await make_memory(storage, "Bob takes his coffee with oat milk", "personal:bob", pending=False)
        rc, out, err = await run_cli(
            "--config", str(config), "memory", "search", "--user", "alice", "--json", "coffee"
        )  # fmt: skip
        assert rc == 0, err
        assert [hit["id"] for hit in json.loads(out)] == [mine.id]  # hers, never Bob's
        assert await storage.identities.users() == []  # the CLI wrote no user: the gateway does, at start
    finally:
        await storage.close()


def _every_user_command(config: Path, user: str) -> list[list[str]]:
    """Each subcommand that takes --user, with `user`, on memories made here; JSON out."""

    async def make(storage: Storage) -> str:
        return (await make_memory(storage, f"{user} waters the ficus on Sundays", f"personal:{user}")).id

    mine = _with_db(config, make)
    batch = config.parent / f"queries-{user}.jsonl"
    batch.write_text(json.dumps({"user": user, "query": "ficus"}) + "\n")
    return [
        ["memory", "search", "--user", user, "--json", "ficus"],
        ["memory", "search", "--batch", str(batch), "--json"],
        ["memory", "search", "--archive", "--user", user, "--json", "ficus"],
        ["memory", "show", mine, "--user", user, "--json"],
        ["memory", "review", "--user", user, "--json"],
        ["memory", "review", "show", mine, "--user", user, "--json"],
        ["memory", "review", "--user", user, "--json", "confirm", mine],
    ]


def test_every_user_option_takes_a_declared_user_and_writes_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _home(tmp_path)
    for args in _every_user_command(config, "alice"):
        rc, out, err = _cli(capsys, config, *args)
        assert rc == 0, (args, err)
        parsed = [json.loads(line) for line in out.splitlines()] if "--batch" in args else [json.loads(out)]
        assert all("error" not in p for p in parsed if isinstance(p, dict)), (args, out)
        assert "no user" not in err, args
    assert _with_db(config, _users) == []


def test_every_user_option_refuses_an_unknown_user(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _home(tmp_path)
    for args in _every_user_command(config, "nobody"):
        rc, out, err = _cli(capsys, config, *args)
        if "--batch" in args:  # the line fails in place, the way to find users is said once
            assert rc == 1 and json.loads(out) == {"line": 1, "error": "no user 'nobody'"}, err
            assert err.count("/whoami") == 1
        elif "--archive" in args:  # there --user only filters: a note explains the empty answer
            assert rc == 0 and json.loads(out) == [] and f"note: no user 'nobody' ({DECLARED};" in err
        else:
            assert (rc, out) == (2, ""), args
            assert f"no user 'nobody' ({DECLARED};" in err and "/whoami" in err, args
    rc, out, err = _cli(capsys, config, "memory", "review", "--user", "telegram:1")
    assert (rc, out) == (2, "") and "that is an identity of alice; use --user alice" in err
    assert _with_db(config, _users) == []


def test_roles_come_from_the_config_over_an_older_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _home(tmp_path)

    async def older_gateway(storage: Storage) -> tuple[str, str, str]:
        # What a gateway under an older config.yaml left: root a plain user, carol an administrator,
        # and a person it met on Telegram.
        await storage.identities.sync_declared([("root", ["user"], []), ("carol", ["admin"], [])])
        met = await storage.identities.resolve("telegram:99", "Dana")
        first = await make_memory(storage, "Releases are tagged on Mondays")
        second = await make_memory(storage, "The wiki moved to docs.example.org")
        await make_memory(storage, "Dana's bike is the red one", f"personal:{met.id}", pending=False)
        return met.id, first.id, second.id

    met, first, second = _with_db(config, older_gateway)
    # root is an administrator in config.yaml: they review global memory.
    rc, out, err = _cli(capsys, config, "memory", "review", "--user", "root", "confirm", first)
    assert rc == 0 and out.startswith("confirmed: "), err
    # carol is declared no more: known from the database, with the plain roles a start leaves her.
    rc, out, err = _cli(capsys, config, "memory", "review", "--user", "carol", "confirm", second)
    assert (rc, out) == (1, "") and "only administrators review global memory" in err
    # Someone met in chat is searched as themselves.
    rc, out, err = _cli(capsys, config, "memory", "search", "--user", met, "--json", "bike")
    assert rc == 0 and [h["content"] for h in json.loads(out)] == ["Dana's bike is the red one"], err

    # The CLI applied nothing: the database says what the older gateway wrote.
    roles = {u.id: u.roles for u in _with_db(config, _users)}
    assert roles == {"root": ("user",), "carol": ("admin",), met: ("user",)}


# -- --json stays JSON ------------------------------------------------------------------------------


@pytest.fixture
async def fake_embeddings() -> AsyncIterator[FakeEmbeddings]:
    fake = await FakeEmbeddings().start()
    yield fake
    await fake.stop()


async def test_search_json_parses_while_the_model_loads_and_notes_are_printed(
    tmp_path: Path, fake_embeddings: FakeEmbeddings
) -> None:
    from memory.embed.embeddings import normalize
    from memory.embed.vectors import VectorStore, text_hash

    search = {"provider": "openai", "model": "fake-embedder", "api_base": f"{fake_embeddings.url}/v1"}
    config = _home(
        tmp_path,
        memory__search=search | {"api_key": "sk-test-000"},
        memory__recall={"min_cosine_similarity": 0.1},  # the fake model has no calibrated floor
    )
    storage = await Storage.open(f"sqlite:///{tmp_path}/data/clawgate.db")
    try:
        texts = ["Alice's team deploys on Tuesdays", "Alice drinks oolong tea every morning"]
        made = [await make_memory(storage, t, "personal:alice", pending=False) for t in texts]
        # One of the two has a vector: the model is loaded, and the other is said to be ranked by words.
        row = (made[0].id, text_hash(texts[0]), normalize(np.array([[1.0, 0.0, 4.0]]))[0])
        await VectorStore(storage.db).upsert("record", [row], "openai/fake-embedder")
    finally:
        await storage.close()

    rc, out, err = await run_cli(
        "--config", str(config), "memory", "search", "--user", "alice", "--json", "deploys", timeout=90
    )  # fmt: skip
    assert rc == 0, err
    assert "loading openai/fake-embedder" in err and "1 of 2 memories have no vector" in err
    hits = json.loads(out)  # nothing but the JSON
    assert hits and hits[0]["content"] == texts[0]


# Every command with --json, and whether it prints one JSON line per item (True) or one document.
JSON_COMMANDS = [
    (["memory", "search", "--user", "alice", "--json", "ficus"], False),
    (["memory", "search", "--batch", "{batch}", "--json"], True),
    (["memory", "search", "--archive", "--json", "ficus"], False),
    (["memory", "show", "{mine}", "--json"], False),
    (["memory", "review", "--json"], False),
    (["memory", "review", "show", "{mine}", "--json"], False),
    (["memory", "review", "--json", "evidence", "{mine}"], False),
    (["memory", "trace", "web:dm:alice", "--json"], False),
    (["memory", "preset", "list", "--json"], False),
    (["memory", "consolidate", "--dry-run", "--json"], False),
    (["memory", "revisions", "list", "--json"], True),
    (["memory", "revisions", "show", "1", "--json"], False),
    (["status", "--json"], False),
    (["jobs", "list", "--json"], True),
]


def test_every_json_command_keeps_a_librarys_print_off_standard_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _home(tmp_path)
    mine = _with_db(config, lambda s: make_memory(s, "Alice waters the ficus on Sundays", "personal:alice")).id
    batch = tmp_path / "queries.jsonl"
    batch.write_text(json.dumps({"user": "alice", "query": "ficus"}) + "\n")
    opened = Storage.open

    async def chatty(cls: type[Storage], *args: Any, **kwargs: Any) -> Storage:
        # A library that reports its progress with print(), as some model loaders do.
        print("loading weights … 42%")
        return await opened(*args, **kwargs)

    monkeypatch.setattr(Storage, "open", classmethod(chatty))
    rc, out, _ = _cli(capsys, config, "status")
    assert rc == 0 and "loading weights" in out  # without --json it is left alone (and the patch works)

    for template, lines in JSON_COMMANDS:
        args = [a.format(batch=batch, mine=mine) for a in template]
        rc, out, err = _cli(capsys, config, *args)
        assert rc == 0, (args, err)
        assert "loading weights … 42%" in err, args
        for document in out.splitlines() if lines else [out]:
            json.loads(document)
