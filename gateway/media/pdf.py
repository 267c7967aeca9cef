"""A PDF's text (docs/media.md), read with pypdf in a child process of its own.

Why a process: a PDF can be made to cost far more to read than its size says (thousands of pages,
streams that inflate a thousandfold, deeply nested objects). pypdf bounds much of that itself, and
its limits are set tighter here; but reading is pure Python that holds the interpreter's lock, so in
a thread it would slow every other conversation while it runs, and a thread cannot be stopped. A
child process runs beside the gateway, under a memory and CPU limit of its own, with an empty
environment (it never sees the gateway's keys), and is killed when its time is up.

The child reads the file from stdin and writes one JSON object to stdout: the page count, how many
pages it read and their text (each page marked), or the reason it could not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])  # where `gateway` is importable from
MEMORY_LIMIT = 768 * 1024 * 1024  # the child's address space, bytes
# pypdf's own ceilings, well under its defaults: a chat attachment needs none of that room.
PYPDF_LIMITS = {
    "zlib_maximum_output_length": 20_000_000,
    "lzw_maximum_output_length": 20_000_000,
    "run_length_maximum_output_length": 20_000_000,
    "array_based_stream_maximum_output_length": 20_000_000,
    "stream_decoding_work_maximum_length": 60_000_000,
    "stream_parsing_work_maximum_count": 500_000,
    "page_tree_maximum_entries": 20_000,
    "xform_maximum_invocations_per_extraction": 500,
}
BOMB = "it unpacks to far more than its size (built to exhaust whatever reads it)"
_CHILD = f"import sys; sys.path.insert(0, {ROOT!r}); from gateway.media.pdf import child_main; child_main()"


class BadPdf(Exception):
    """The PDF could not be read: `reason` in plain words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class PdfText:
    pages: int  # in the file
    read: int  # of them, read
    text: str
    stopped: str | None = None  # why reading stopped early: "pages", "chars" or "time"


async def read(data: bytes, *, max_pages: int, max_chars: int, seconds: float) -> PdfText:
    """The text of the PDF `data`: at most `max_pages` pages and `max_chars` characters, read within
    `seconds` (past that the child is killed and BadPdf says so)."""
    args = json.dumps({"max_pages": max_pages, "max_chars": max_chars, "seconds": seconds})
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _CHILD,
        args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={"PYTHONDONTWRITEBYTECODE": "1", "LC_ALL": "C.UTF-8"},
    )
    try:
        # The child stops itself at its deadline between pages; the margin covers its start and one page.
        async with asyncio.timeout(seconds + 5):
            out, _ = await proc.communicate(data)
    except TimeoutError:
        raise BadPdf(f"reading it took longer than {seconds:g} s") from None
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
    try:
        result = json.loads(out)
    except ValueError:
        # Killed by its own limits (memory, CPU) or crashed: nothing readable came out.
        raise BadPdf("reading it took more memory or time than a PDF may") from None
    if "error" in result:
        raise BadPdf(str(result["error"]))
    return PdfText(int(result["pages"]), int(result["read"]), str(result["text"]), result.get("stopped"))


# -- the child ---------------------------------------------------------------------------------------


def child_main() -> None:
    """The child process's whole life: limits, read stdin, extract, print the result."""
    import resource

    args = json.loads(sys.argv[1])
    seconds = float(args["seconds"])
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
        cpu = int(seconds) + 2
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    data = sys.stdin.buffer.read()
    try:
        result = extract(data, int(args["max_pages"]), int(args["max_chars"]), seconds)
    except MemoryError:
        result = {"error": "reading it took more memory than a PDF may"}
    sys.stdout.write(json.dumps(result))
    sys.stdout.flush()


def extract(data: bytes, max_pages: int, max_chars: int, seconds: float) -> dict[str, object]:
    """Run in the child: the text of up to `max_pages` pages, each after a "[page N]" line."""
    import io
    import time

    import pypdf
    from pypdf.errors import LimitReachedError, PdfReadError

    pypdf.overwrite_configuration(None, **PYPDF_LIMITS)
    deadline = time.monotonic() + seconds
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            return {"error": "it is protected by a password"}
        pages = len(reader.pages)
    except LimitReachedError:
        return {"error": BOMB}
    except (PdfReadError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError) as exc:
        return {"error": f"it is damaged or not a PDF ({type(exc).__name__})"}
    except Exception as exc:  # pypdf raises a few more kinds on hostile files (its limits among them)
        return {"error": f"it could not be read ({type(exc).__name__})"}
    parts: list[str] = []
    used = 0
    read = 0
    stopped: str | None = "pages" if pages > max_pages else None
    for number in range(min(pages, max_pages)):
        if time.monotonic() > deadline:
            stopped = "time"
            break
        try:
            text = (reader.pages[number].extract_text() or "").strip()
        except LimitReachedError:
            return {"error": BOMB}  # one page that inflates past every limit: the file is built to hurt
        except Exception as exc:  # one bad page: the others are still worth reading
            text = f"(this page could not be read: {type(exc).__name__})"
        piece = f"[page {number + 1}]\n{text}" if text else f"[page {number + 1}] (no text)"
        read += 1
        if used + len(piece) > max_chars:
            parts.append(piece[: max(0, max_chars - used)])
            stopped = "chars"
            break
        parts.append(piece)
        used += len(piece) + 2
    return {"pages": pages, "read": read, "text": "\n\n".join(parts), "stopped": stopped}
