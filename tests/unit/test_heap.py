"""A gateway in its own process keeps glibc to two malloc arenas (gateway/core/heap.py): counted
with glibc's own malloc_info, in a child process whose threads allocate at once."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gateway.core.heap import limit_malloc_arenas

REPO = Path(__file__).resolve().parents[2]

glibc = pytest.mark.skipif(
    not hasattr(ctypes.CDLL(None), "malloc_info"), reason="not glibc: there is no arena limit to set"
)

# Eight threads allocate and hold memory at the same time, then glibc describes its heaps: one
# `<heap nr=…>` element per arena.
CHILD = textwrap.dedent(
    """
    import ctypes, os, sys, tempfile, threading
    from gateway.core.heap import limit_malloc_arenas
    if sys.argv[1] == "limit":
        assert limit_malloc_arenas()
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = (ctypes.c_void_p,)
    start, done = threading.Barrier(9), threading.Barrier(9)
    def work():
        start.wait()
        blocks = [libc.malloc(4096) for _ in range(200)]
        done.wait()
        for b in blocks:
            libc.free(b)
    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    start.wait()
    done.wait()
    for t in threads:
        t.join()
    libc.fdopen.restype = ctypes.c_void_p
    libc.fdopen.argtypes = (ctypes.c_int, ctypes.c_char_p)
    libc.malloc_info.argtypes = (ctypes.c_int, ctypes.c_void_p)
    libc.fflush.argtypes = (ctypes.c_void_p,)
    with tempfile.TemporaryFile() as f:
        stream = libc.fdopen(os.dup(f.fileno()), b"w")
        libc.malloc_info(0, stream)
        libc.fflush(stream)
        f.seek(0)
        print(f.read().decode().count("<heap nr="))
    """
)


def arenas(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={**env, "PYTHONPATH": str(REPO)},
    )
    return int(out.stdout.strip())


@glibc
def test_two_arenas_however_many_threads_allocate() -> None:
    assert arenas("limit") <= 2
    assert arenas("as-is") > 2  # what the limit changes: a thread of its own, an arena of its own


def test_an_operators_malloc_arena_max_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert limit_malloc_arenas() is False
