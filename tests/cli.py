"""Run `clawgate` as a separate process, as an operator would.

Each run is a process of its own, with its own environment, standard streams and exit code. It is
not a fresh interpreter, though: importing the CLI takes about 2.5 s, and the suite runs it over a
hundred times. So each test worker starts one helper process (tests/cli_zygote.py) that imports
the CLI once, with the environment `python -m gateway` would get here, and forks a child for every
run. Set CLAWGATE_TEST_CLI_FRESH=1 to start `python -m gateway` afresh for every run instead.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENV = {"PYTHONPATH": str(REPO)}


async def run_cli(*args: str, timeout: float = 60, stdin: bytes | None = None) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `python -m gateway ARGS` run from this checkout; `stdin` is
    written to its standard input."""
    if os.environ.get("CLAWGATE_TEST_CLI_FRESH"):
        return await _fresh(args, timeout, stdin)
    return await _forked(args, timeout, stdin)


async def _fresh(args: tuple[str, ...], timeout: float, stdin: bytes | None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else None,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=ENV,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), timeout=timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def _forked(args: tuple[str, ...], timeout: float, stdin: bytes | None) -> tuple[int, str, str]:
    work = Path(tempfile.mkdtemp(prefix="clawgate-cli-"))
    try:
        request = {
            "args": list(args),
            "cwd": os.getcwd(),
            "stdin": None,
            "out": str(work / "out"),
            "err": str(work / "err"),
            "rc": str(work / "rc"),
        }
        if stdin is not None:
            (work / "in").write_bytes(stdin)
            request["stdin"] = str(work / "in")
        pid = _Zygote.get().fork(request)
        rc_file = work / "rc"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not rc_file.exists():
            if loop.time() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                raise TimeoutError(f"clawgate {' '.join(args)} ran past {timeout} s")
            await asyncio.sleep(0.01)
        rc = int(rc_file.read_text())
        read = lambda name: (work / name).read_bytes().decode()  # noqa: E731
        return rc, read("out"), read("err")
    finally:
        shutil.rmtree(work, ignore_errors=True)


class _Zygote:
    """The helper process of this test worker, started on first use, ended with the worker."""

    _one: _Zygote | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.cli_zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=ENV,
            cwd=REPO,
        )
        atexit.register(self.close)

    @classmethod
    def get(cls) -> _Zygote:
        with cls._lock:
            if cls._one is None or cls._one.proc.poll() is not None:
                cls._one = cls()
            return cls._one

    def fork(self, request: dict[str, object]) -> int:
        """Start one run; the child's pid (it writes its exit code to request["rc"] as it ends)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with self._lock:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the CLI helper process ended; run with CLAWGATE_TEST_CLI_FRESH=1 to see why")
        return int(json.loads(line)["pid"])

    def close(self) -> None:
        with contextlib.suppress(Exception):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
