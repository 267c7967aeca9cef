"""Run `clawgate` (python -m gateway) as a separate process, as an operator would."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


async def run_cli(*args: str, timeout: float = 60, stdin: bytes | None = None) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `python -m gateway ARGS` run from this checkout; `stdin` is
    written to its standard input."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else None,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"PYTHONPATH": str(REPO)},
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), timeout=timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()
