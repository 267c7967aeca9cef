from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from datetime import date
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory.archive.daily import DailyFiles, normalize_bullet, safe_component
from memory.trust.redact import REDACTED

DAY = date(2024, 5, 1)
REPO = Path(__file__).resolve().parents[2]


def test_layout_and_names(tmp_path: Path) -> None:
    files = DailyFiles(tmp_path)
    assert files.path("global", None, DAY) == tmp_path / "2024-05-01.md"
    assert files.path("user", "alice", DAY) == tmp_path / "users" / "alice" / "2024-05-01.md"
    assert files.path("user", "u-3f2a", date(2025, 12, 31)) == tmp_path / "users" / "u-3f2a" / "2025-12-31.md"
    channel = files.path("channel", "telegram:group:-100123:42", DAY)
    assert channel.parent.parent == tmp_path / "channels"
    assert channel.parent.name.startswith("telegram_group_-100123_42~")
    assert channel == files.path("channel", "telegram:group:-100123:42", DAY)  # stable
    with pytest.raises(ValueError):
        files.path("global", "alice", DAY)
    with pytest.raises(ValueError):
        files.path("user", None, DAY)


UNSAFE_OWNERS = [
    "../../etc",
    "..",
    ".",
    "",
    "/abs",
    "a/b",
    "a\\b",
    "a\x00b",
    "x" * 500,
    "ünïcødé",
    "😀",
    ".hidden",
    "a:b",
]


@pytest.mark.parametrize("owner", UNSAFE_OWNERS)
def test_unsafe_owners_stay_one_component_under_their_scope(tmp_path: Path, owner: str) -> None:
    name = safe_component(owner)
    assert name not in ("", ".", "..")
    assert not name.startswith(".")
    assert "/" not in name and "\\" not in name and "\x00" not in name
    assert len(name) <= 133
    files = DailyFiles(tmp_path / "memory")
    path = files.path("user", owner, DAY)
    assert path.resolve().parent.parent == (tmp_path / "memory" / "users").resolve()
    files.append(path, "notes", ["something"])
    assert path.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memory"]


def test_changed_names_never_collide_with_kept_ones() -> None:
    assert safe_component("a_b") == "a_b"
    assert safe_component("a:b") != "a_b"
    assert safe_component("a:b") != safe_component("a;b")
    long_a, long_b = "x" * 200 + "a", "x" * 200 + "b"
    assert safe_component(long_a) != safe_component(long_b)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300), st.text(max_size=300))
def test_safe_component_is_safe_and_injective(a: str, b: str) -> None:
    for owner in (a, b):
        name = safe_component(owner)
        assert name and name not in (".", "..") and not name.startswith(".")
        assert all(c.isascii() and (c.isalnum() or c in "._-~") for c in name)
    if a != b:
        assert safe_component(a) != safe_component(b)


def test_append_creates_file_with_header(tmp_path: Path) -> None:
    files = DailyFiles(tmp_path)
    path = files.path("user", "alice", DAY)
    assert files.read(path) == ""
    written = files.append(path, "Flush 10:00", ["Alice likes tea.", "  ", "Meeting moved\n  to Friday"])
    assert written == ["Alice likes tea.", "Meeting moved to Friday"]
    assert files.read(path) == "# 2024-05-01\n\n## Flush 10:00\n\n- Alice likes tea.\n- Meeting moved to Friday\n"


def test_second_flush_adds_only_what_is_new(tmp_path: Path) -> None:
    files = DailyFiles(tmp_path)
    path = files.path("global", None, DAY)
    files.append(path, "first", ["Alice likes tea.", "Deploy on Friday"])
    written = files.append(
        path, "second", ["alice   LIKES tea", "Bob prefers coffee.", "bob prefers coffee!", "deploy on friday."]
    )
    assert written == ["Bob prefers coffee."]
    assert files.read(path) == (
        "# 2024-05-01\n\n## first\n\n- Alice likes tea.\n- Deploy on Friday\n\n## second\n\n- Bob prefers coffee.\n"
    )


def test_nothing_new_leaves_the_file_untouched(tmp_path: Path) -> None:
    files = DailyFiles(tmp_path)
    path = files.path("channel", "slack:C123", DAY)
    files.append(path, "first", ["one", "two"])
    before, stat = files.read(path), path.stat()
    assert files.append(path, "again", ["One.", "TWO", ""]) == []
    after = path.stat()
    assert files.read(path) == before
    assert (after.st_mtime_ns, after.st_ino) == (stat.st_mtime_ns, stat.st_ino)
    assert files.append(files.path("user", "nobody", DAY), "empty", ["", " \n "]) == []
    assert not (tmp_path / "users").exists()


def test_existing_content_is_never_changed(tmp_path: Path) -> None:
    files = DailyFiles(tmp_path)
    path = files.path("global", None, DAY)
    hand_written = "# 2024-05-01\n\nSome hand notes\n- Existing bullet\n## odd heading without newline"
    path.write_text(hand_written, encoding="utf-8")
    assert files.append(path, "flush", ["existing bullet.", "fresh"]) == ["fresh"]
    assert files.read(path) == hand_written + "\n\n## flush\n\n- fresh\n"


def test_secrets_in_bullets_are_redacted(tmp_path: Path) -> None:
    token = "ghp_" + "Ab1Cd2Ef3G" * 4
    configured = "relay-pass-0042"
    files = DailyFiles(tmp_path, secrets=[configured])
    path = files.path("user", "alice", DAY)
    written = files.append(path, f"uses {configured}", [f"Alice pasted {token}", f"password={configured}", "fine"])
    assert written == [f"Alice pasted {REDACTED}", f"password={REDACTED}", "fine"]
    content = files.read(path)
    assert token not in content and configured not in content
    assert f"## uses {REDACTED}\n" in content
    # The same secret pasted again is "already written" once redacted.
    assert files.append(path, "again", [f"Alice pasted {'ghp_' + 'Zz9' * 12}"]) == []


def test_append_refuses_non_daily_names(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        DailyFiles(tmp_path).append(tmp_path / "Memory.md", "x", ["y"])


def test_days_lists_daily_files_only(tmp_path: Path) -> None:
    files = DailyFiles(tmp_path)
    for day in (date(2024, 5, 3), date(2024, 4, 30), DAY):
        files.append(files.path("user", "alice", day), "h", [f"note {day}"])
    folder = files.path("user", "alice", DAY).parent
    for junk in (".2024-05-02.md.0123abcd.tmp", "2024-13-45.md", "Memory.md", "2024-05-04.md.bak", "notes.md"):
        (folder / junk).write_text("x", encoding="utf-8")
    (folder / "2024-05-05.md").mkdir()
    assert files.days("user", "alice") == [date(2024, 4, 30), DAY, date(2024, 5, 3)]
    assert files.days("user", "bob") == []
    assert files.days("global", None) == []


def _bullets(content: str) -> list[str]:
    return [line[2:] for line in content.splitlines() if line.startswith("- ")]


def test_concurrent_appends_land_exactly_once(tmp_path: Path) -> None:
    files = DailyFiles(tmp_path)
    path = files.path("channel", "discord:1:2", DAY)
    start = threading.Barrier(8)
    returned: list[list[list[str]]] = [[] for _ in range(8)]
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            start.wait(timeout=10)
            for k in range(10):
                returned[n].append(
                    files.append(path, f"thread {n} flush {k}", [f"t{n} k{k} a", f"shared {k}", f"t{n} k{k} b"])
                )
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=50)
    assert not errors
    expected = {f"t{n} k{k} {s}" for n in range(8) for k in range(10) for s in "ab"} | {
        f"shared {k}" for k in range(10)
    }
    in_file = _bullets(files.read(path))
    assert sorted(in_file) == sorted(expected)
    assert sorted(b for calls in returned for call in calls for b in call) == sorted(expected)
    content = files.read(path)
    assert content.startswith("# 2024-05-01\n\n## thread ")
    assert content.count("\n## ") == 8 * 10  # every call had its own two bullets to add
    assert [p.name for p in path.parent.iterdir()] == [path.name]


# --- kill -9 during a flush --------------------------------------------------------------------

CHILD = """
import hashlib, sys
from datetime import date
from pathlib import Path
from memory.archive.daily import DailyFiles

files = DailyFiles(Path(sys.argv[1]))
path = files.path("channel", "telegram:group:-100123:42", date(2024, 5, 1))
round_ = int(sys.argv[2])
pad = " ".join(["lorem ipsum dolor sit amet"] * 3)
section = 0
while True:
    bullets = [f"r{round_} s{section} b{j} {pad}" for j in range(120)]
    digest = hashlib.sha256("\\n".join(bullets).encode()).hexdigest()
    bullets.append(f"end r{round_} s{section} count={len(bullets)} sha={digest}")
    files.append(path, f"round {round_} section {section}", bullets)
    section += 1
"""


def _check_complete(content: str) -> list[str]:
    """Assert the file parses into whole sections; return their headings."""
    header = "# 2024-05-01\n"
    assert content.startswith(header)
    assert content.endswith("\n")
    parts = content[len(header) :].split("\n## ")
    assert parts[0] == ""
    headings = []
    for part in parts[1:]:
        lines = part.split("\n")
        heading, blank, bullets, last = lines[0], lines[1], lines[2:-1], lines[-1]
        assert blank == "" and last == ""
        assert all(line.startswith("- ") for line in bullets)
        texts = [line[2:] for line in bullets]
        end = texts.pop()
        round_, section = heading.removeprefix("round ").split(" section ")
        digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()
        assert end == f"end r{round_} s{section} count={len(texts)} sha={digest}"
        headings.append(heading)
    return headings


def test_kill_9_during_a_flush_leaves_a_valid_file(tmp_path: Path) -> None:
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    root = tmp_path / "memory"
    files = DailyFiles(root)
    path = files.path("channel", "telegram:group:-100123:42", DAY)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    previous = ""
    for round_ in range(5):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(root), str(round_)], env=env, cwd=REPO, stderr=subprocess.PIPE
        )
        try:
            # Watching another process: a short, bounded poll until this round has written.
            deadline = time.monotonic() + 30
            while not path.exists() or path.stat().st_size <= len(previous.encode()):
                assert child.poll() is None, child.stderr.read().decode() if child.stderr else ""
                assert time.monotonic() < deadline, "child wrote nothing"
                time.sleep(0.005)
            try:  # then a random moment later, mid-write more often than not
                child.wait(timeout=rng.uniform(0, 0.3))
            except subprocess.TimeoutExpired:
                pass
            child.send_signal(signal.SIGKILL)
        finally:
            child.kill()
            child.wait(timeout=10)
            if child.stderr:
                stderr = child.stderr.read().decode()
                child.stderr.close()
        assert child.returncode == -signal.SIGKILL, f"seed={seed} {stderr}"
        content = files.read(path)
        assert content.startswith(previous), f"seed={seed}: earlier rounds lost"
        headings = _check_complete(content)
        assert any(h.startswith(f"round {round_} ") for h in headings)
        leftovers = [p.name for p in path.parent.iterdir() if p != path]
        assert all(name.startswith(".") and name.endswith(".tmp") for name in leftovers), leftovers
        assert files.days("channel", "telegram:group:-100123:42") == [DAY]
        previous = content


def test_normalize_bullet() -> None:
    assert normalize_bullet("  Hello,   World!! ") == "hello, world"
    assert normalize_bullet("Straße…") == normalize_bullet("STRASSE")
    assert normalize_bullet("...") == ""
