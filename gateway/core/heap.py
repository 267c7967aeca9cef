"""How a gateway that owns its process (`clawgate run`) keeps its C heap small.

glibc's malloc gives each thread that allocates an arena of its own, up to eight per core, and
memory freed in one arena is not reused by the others. The gateway's threads (the database's, the
embedding model's, onnxruntime's, asyncio's executor) each grow one: in the 20-session benchmark
with 10,000 memories and local embeddings (benchmarks/turn_overhead.py), two arenas kept the
peak RSS at 377 MiB against 398, at the same CPU a turn. This is glibc's own tunable
(`mallopt(M_ARENA_MAX)`, the same as the MALLOC_ARENA_MAX variable); an operator who sets the
variable keeps their value, and elsewhere than on glibc nothing is changed.
"""

from __future__ import annotations

import ctypes
import os

M_ARENA_MAX = -8  # glibc's malloc.h
ARENAS = 2


def limit_malloc_arenas(arenas: int = ARENAS) -> bool:
    """Ask glibc for at most `arenas` malloc arenas, before the threads start; whether it took."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not a glibc-like libc: nothing to tune
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))
