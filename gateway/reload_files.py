"""The files through which `clawgate reload` reaches a running gateway, both in storage.data_dir:
`clawgate.pid` (the gateway's process id, written once it has started, removed when it stops) and
`reload-status.json` (the outcomes of its latest reloads, written by gateway/reload.py)."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.core.logs import event

log = logging.getLogger("clawgate.reload")

PID_FILE = "clawgate.pid"
STATUS_FILE = "reload-status.json"


def write_atomically(path: Path, text: str) -> None:
    """Replace `path` whole: a reader sees the old content or the new, never a part."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_pid_file(data_dir: Path) -> Path:
    path = data_dir / PID_FILE
    write_atomically(path, f"{os.getpid()}\n")
    return path


def try_write_pid_file(data_dir: Path) -> Path | None:
    """The pid file, or None (logged) when it cannot be written: that is no reason to stop
    serving, SIGHUP still reloads."""
    try:
        return write_pid_file(data_dir)
    except OSError as exc:
        event(
            log,
            "pid_file_not_written",
            logging.WARNING,
            data_dir=data_dir,
            error=exc.strerror or type(exc).__name__,
            hint=f"clawgate reload cannot find this gateway; kill -HUP {os.getpid()} reloads",
        )
        return None


def remove_pid_file(path: Path | None) -> None:
    """Remove the pid file if it is still this process's (another gateway may have taken it over)."""
    if path is None:
        return
    try:
        if path.read_text(encoding="utf-8").strip() == str(os.getpid()):
            path.unlink()
    except OSError:
        pass  # already gone, or never written


def _process_started_at(pid: int) -> float | None:
    """When process `pid` started (Unix time), from /proc; None where there is no /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, counted after the command name
        boot = next(
            int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime ")
        )
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class RunningGateway:
    pid: int | None  # None: no gateway runs for this data_dir
    why_not: str = ""  # when pid is None, in plain words


def running_gateway(data_dir: Path) -> RunningGateway:
    """The gateway whose pid file is in `data_dir`, if it still runs. A pid file left by a killed
    gateway names a process that is gone, or one that started after the file was written (its
    number was reused): signalling that one could kill an unrelated program."""
    path = data_dir / PID_FILE
    try:
        text = path.read_text(encoding="utf-8")
        written = path.stat().st_mtime
    except FileNotFoundError:
        return RunningGateway(None, f"there is no {path}")
    except OSError as exc:
        return RunningGateway(None, f"{path} cannot be read ({exc.strerror or type(exc).__name__})")
    try:
        pid = int(text.strip())
    except ValueError:
        return RunningGateway(None, f"{path} does not hold a process id")
    gone = RunningGateway(None, f"{path} names process {pid}, which is not running (a gateway that was killed left it)")
    if pid <= 0:
        return gone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return gone
    except PermissionError:
        pass  # it runs, as another user: sending the signal says so
    started = _process_started_at(pid)
    if started is not None and started > written + 2:  # 2 s: /proc's boot time is whole seconds
        return gone
    return RunningGateway(pid)


def read_outcomes(data_dir: Path) -> list[dict[str, Any]]:
    """The latest reloads' outcomes the gateway wrote, oldest first ([] when there are none yet)."""
    try:
        data = json.loads((data_dir / STATUS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    recent = data.get("recent") if isinstance(data, dict) else None
    return [o for o in recent if isinstance(o, dict)] if isinstance(recent, list) else []
