"""The helper process behind tests/cli.py: imports the CLI once, then forks a child per run.

Requests come as JSON lines on standard input (args, cwd, and the files for the child's stdin,
stdout, stderr and exit code); each is answered at once with the child's pid. The child runs
`clawgate ARGS` as `python -m gateway ARGS` would and writes its exit code last, so a reader that
sees the file sees complete output. This process starts no thread (fork would copy its locks), and
children are reaped by the kernel (SIGCHLD ignored). It ends when its standard input closes.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # as gateway.cli.main sets it

import json
import logging
import signal
import sys
import threading
import traceback

import litellm  # noqa: F401

# What most commands load on their way; each child would otherwise import it anew.
import gateway.cli.backup
import gateway.cli.main
import gateway.cli.onboard
import gateway.doctor.report
import gateway.recall.engine
import memory.store.storage  # noqa: F401


def _child(request: dict[str, object]) -> None:
    """In the forked child: the run, its streams, its exit code; never returns."""
    rc = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # its own subprocesses are waited for as usual
        stdin = request.get("stdin") or os.devnull
        for fd, path, mode in ((0, stdin, os.O_RDONLY), (1, request["out"], None), (2, request["err"], None)):
            flags = mode if mode is not None else os.O_WRONLY | os.O_CREAT | os.O_TRUNC
            opened = os.open(str(path), flags, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False)
        os.chdir(str(request["cwd"]))
        sys.path[0] = str(request["cwd"])  # as `python -m` puts the working directory first
        args = [str(a) for a in request["args"]]  # type: ignore[attr-defined]
        sys.argv = ["clawgate", *args]
        try:
            rc = gateway.cli.main.main(args)
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                rc = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
                rc = 1
        except BaseException:
            traceback.print_exc()
            rc = 1
    finally:
        try:
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            done = f"{request['rc']}.tmp"
            with open(done, "w") as f:
                f.write(str(rc))
            os.replace(done, str(request["rc"]))
        finally:
            os._exit(0)


def main() -> None:
    assert threading.active_count() == 1, "a thread before fork: the children could deadlock"
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    for line in sys.stdin.buffer:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        sys.stdout.write(json.dumps({"pid": pid}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
