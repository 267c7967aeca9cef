"""A gateway as its own process (`python -m gateway --config FILE run`), as an operator starts it:
its log is read as it is written, so a test can wait for an event in it, and it is stopped (or
killed) at the end whatever happened."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

REPO = Path(__file__).resolve().parents[1]


def write_config(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


class GatewayProcess:
    def __init__(self, proc: asyncio.subprocess.Process, name: str) -> None:
        self.proc = proc
        self.name = name
        self.lines: list[str] = []
        self.url = ""
        self._changed = asyncio.Condition()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(
        cls,
        config: Path,
        *,
        ready: str = "gateway_ready",
        name: str = "gateway",
        prefix: Sequence[str] = (),
        env: dict[str, str] | None = None,
        timeout: float = 60,
    ) -> GatewayProcess:
        """Start it and wait until it logs `ready`. `prefix`: a command it runs under (`unshare ...`)."""
        proc = await asyncio.create_subprocess_exec(
            *prefix,
            sys.executable,
            "-m",
            "gateway",
            "--config",
            str(config),
            "run",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        )
        gateway = cls(proc, name)
        try:
            await gateway.wait_log(ready, timeout)
            listening = next(m for text in gateway.lines if (m := re.search(r"web_listening .*url=(\S+)", text)))
            gateway.url = listening.group(1)
        except BaseException:
            await gateway.stop()
            raise
        return gateway

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    @property
    def text(self) -> str:
        """Its log so far."""
        return "\n".join(self.lines)

    def alive(self) -> bool:
        return self.proc.returncode is None

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            async with self._changed:
                self.lines.append(line.decode(errors="replace").rstrip("\n"))
                self._changed.notify_all()
        async with self._changed:
            self._changed.notify_all()

    async def wait_log(self, fragment: str, timeout: float = 20, after: int = 0) -> str:
        """The first log line from line `after` on that holds `fragment`; fails if the process ends first."""

        def found() -> str | None:
            return next((line for line in self.lines[after:] if fragment in line), None)

        async with asyncio.timeout(timeout), self._changed:
            while (line := found()) is None:
                if self._reader.done():
                    raise AssertionError(f"the gateway exited ({self.proc.returncode}) before logging {fragment!r}")
                await self._changed.wait()
        return line

    def send(self, sig: signal.Signals) -> None:
        if self.proc.returncode is None:
            self.proc.send_signal(sig)

    async def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 30) -> int:
        """`sig`, then SIGKILL if it does not end in time; its exit code."""
        self.send(sig)
        try:
            await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        await asyncio.wait_for(self._reader, 5)
        assert self.proc.returncode is not None
        return self.proc.returncode
