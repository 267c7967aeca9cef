"""The files through which `clawgate reload` finds a running gateway and reads what came of a
reload (gateway/reload_files.py): a pid file left by a killed gateway never names a live process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gateway.reload_files import (
    PID_FILE,
    STATUS_FILE,
    read_outcomes,
    remove_pid_file,
    running_gateway,
    write_atomically,
    write_pid_file,
)


def test_a_pid_file_of_a_running_process_names_it(tmp_path: Path) -> None:
    path = write_pid_file(tmp_path)
    assert path == tmp_path / PID_FILE and path.read_text() == f"{os.getpid()}\n"
    assert running_gateway(tmp_path).pid == os.getpid()
    assert [p.name for p in tmp_path.iterdir()] == [PID_FILE]  # no temporary file left behind


def test_no_pid_file_means_no_gateway(tmp_path: Path) -> None:
    found = running_gateway(tmp_path)
    assert found.pid is None and found.why_not == f"there is no {tmp_path / PID_FILE}"


@pytest.mark.parametrize("text", ["", "not a number\n", "-5\n", "0\n"])
def test_a_pid_file_without_a_process_id_names_none(tmp_path: Path, text: str) -> None:
    (tmp_path / PID_FILE).write_text(text)
    found = running_gateway(tmp_path)
    assert found.pid is None and str(tmp_path / PID_FILE) in found.why_not


def test_a_pid_file_of_a_process_that_is_gone(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=30)
    (tmp_path / PID_FILE).write_text(f"{child.pid}\n")
    found = running_gateway(tmp_path)
    assert found.pid is None
    assert found.why_not == (
        f"{tmp_path / PID_FILE} names process {child.pid}, which is not running (a gateway that was killed left it)"
    )


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process start times come from /proc")
def test_a_pid_file_older_than_the_process_it_names_is_stale(tmp_path: Path) -> None:
    """The number was reused: the process that has it now started after the file was written."""
    path = write_pid_file(tmp_path)
    long_ago = time.time() - 10 * 365 * 86400
    os.utime(path, (long_ago, long_ago))
    found = running_gateway(tmp_path)
    assert found.pid is None and "which is not running" in found.why_not


def test_the_pid_file_is_removed_only_while_it_is_ours(tmp_path: Path) -> None:
    path = write_pid_file(tmp_path)
    remove_pid_file(path)
    assert not path.exists()
    remove_pid_file(path)  # already gone: nothing to do
    path.write_text("1\n")  # another gateway took it over
    remove_pid_file(path)
    assert path.read_text() == "1\n"


def test_a_failed_atomic_write_leaves_the_old_file_and_no_temporary_one(tmp_path: Path) -> None:
    target = tmp_path / "status.json"
    target.mkdir()  # cannot be replaced by a file
    with pytest.raises(OSError):
        write_atomically(target, "{}")
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]


@pytest.mark.parametrize(
    ("text", "outcomes"),
    [
        (None, []),
        ("", []),
        ("{not json", []),
        ('["a list"]', []),
        ('{"recent": "nope"}', []),
        ('{"recent": [{"result": "applied"}, 3]}', [{"result": "applied"}]),
    ],
)
def test_outcomes_are_read_whatever_the_file_holds(tmp_path: Path, text: str | None, outcomes: list[object]) -> None:
    if text is not None:
        (tmp_path / STATUS_FILE).write_text(text)
    assert read_outcomes(tmp_path) == outcomes
