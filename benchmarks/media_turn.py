#!/usr/bin/env python3
"""What a picture, a voice note or a PDF adds to a turn (docs/media.md), against a text turn of the
same run: latency and the gateway's CPU.

    .venv/bin/python benchmarks/media_turn.py              # 5 rounds of 6 turns of each kind
    .venv/bin/python benchmarks/media_turn.py --rounds 2   # a quick look
    .venv/bin/python benchmarks/media_turn.py --json out.json

Two processes, so that the gateway's CPU is counted apart:
  * this one: the local Telegram Bot API fake (getFile and the file URL) and the fake model, which
    answers at once (its transcription endpoint too), plus the load and the clocks;
  * the gateway: `Gateway(config)` with a Telegram channel on the fake, SQLite in a temporary
    directory, `ai.model: openai/gpt-4o` (LiteLLM says it can see pictures) and a transcription model.
    Its CPU time (all threads, and the PDF reader's child processes) is read from /proc/<pid>/stat.

Each turn is a Telegram DM from a person of its own kind (one session per kind, so histories stay
alike), sent once the previous reply is out. Latency runs from the update's arrival at the fake (the
long poll answers at once) to the reply's sendMessage. The kinds: a text message, a photo (a
1600x1200 JPEG, scaled to 2048 px at most and sent as an image part), a 14 s voice note
(downloaded and transcribed by the fake) and a 3-page PDF. Rounds alternate the kinds, so a busy
moment of the machine falls on all of them; the table gives latency percentiles over every turn, and
the gateway's CPU per turn as the mean over each kind's batches (the kernel counts in 10 ms ticks).
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import asyncio
import io
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.fakes import media  # noqa: E402
from tests.fakes.llm import TRANSCRIPTION_MODEL, VISION_MODEL, FakeLLM, Reply  # noqa: E402
from tests.fakes.telegram import FakeTelegram  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
KINDS = ("text", "photo", "voice", "pdf")
SENDERS = {"text": 2001, "photo": 2002, "voice": 2003, "pdf": 2004}


def photo() -> bytes:
    """A photo-like JPEG: a gradient with noise, so it compresses as a photograph does."""
    from PIL import Image, ImageFilter

    grain = Image.effect_noise((1600, 1200), 12).convert("RGB")
    scene = Image.merge("RGB", [Image.linear_gradient("L").resize((1600, 1200)).rotate(a) for a in (0, 90, 180)])
    img = Image.blend(scene, grain, 0.25).filter(ImageFilter.GaussianBlur(1))
    out = io.BytesIO()
    img.save(out, "JPEG", quality=85)
    return out.getvalue()


def config_data(tg: FakeTelegram, llm: FakeLLM, data_dir: str) -> dict[str, Any]:
    return {
        "ai": {
            "model": VISION_MODEL,
            "api_base": llm.api_base,
            "api_key": "sk-bench-not-a-real-key-000000",
            "retries": 0,
            "transcription": {"model": TRANSCRIPTION_MODEL},
        },
        "storage": {"data_dir": data_dir},
        "channels": {
            "web": {"host": "127.0.0.1", "port": 0},
            "telegram": {"token": tg.token, "api_base_url": tg.api_base_url, "dm_policy": "open", "poll_timeout": 30},
        },
        "logging": {"level": "WARNING"},
        "memory": {"merge": {"enabled": False}},
    }


# -- the gateway's process ------------------------------------------------------------------------------


async def serve(data: dict[str, Any]) -> None:
    from gateway.app import Gateway
    from gateway.config.load import parse_config

    gw = Gateway(parse_config(data, "benchmark", env={}))
    await gw.start()
    await gw.llm.ready()
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    loop.add_reader(sys.stdin.fileno(), lambda: done.set() if not os.read(sys.stdin.fileno(), 1024) else None)
    await done.wait()
    await gw.stop(deadline=2)


# -- this process ---------------------------------------------------------------------------------------


def cpu_s(pid: int) -> float:
    """utime + stime of a process and of its children it waited for (the PDF readers), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / CLK_TCK  # fields 14-17 of stat(5)


async def one_turn(tg: FakeTelegram, kind: str, files: dict[str, bytes]) -> float:
    """Seconds from the update's arrival (the gateway's waiting long poll answers at once) to its reply."""
    before = len([s for s in tg.sent if not s.edit])
    sender = SENDERS[kind]
    started = time.perf_counter()
    if kind == "text":
        await tg.dm("what is the deploy window?", sender=sender)
    elif kind == "photo":
        await tg.media_dm("photo", files["photo"], sender=sender)
    elif kind == "voice":
        await tg.media_dm("voice", files["voice"], sender=sender, duration=14, mime_type="audio/ogg")
    else:
        await tg.media_dm("document", files["pdf"], sender=sender, file_name="minutes.pdf", mime_type="application/pdf")
    await tg.wait_for(lambda _: len([s for s in tg.sent if not s.edit]) > before, timeout=60)
    return time.perf_counter() - started


async def run(rounds: int, per_batch: int) -> dict[str, Any]:
    llm = await FakeLLM().start()
    llm.default = lambda _request: Reply("Noted: the window is at 17:30.", chunks=1)
    tg = await FakeTelegram().start()
    files = {
        "photo": photo(),
        "voice": media.ogg_voice(14, noise=20_000),
        "pdf": media.pdf(["Minutes of the planning meeting", "The deploy window moved to 17:30", "Actions"]),
    }
    with tempfile.TemporaryDirectory(prefix="clawgate-media-bench-") as tmp:
        config_path = Path(tmp) / "config.json"
        config_path.write_text(json.dumps(config_data(tg, llm, str(Path(tmp) / "data"))))
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--serve",
            str(config_path),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")},
        )
        assert child.stdout is not None and child.stdin is not None
        try:
            async with asyncio.timeout(120):
                while (await child.stdout.readline()).strip() != b"ready":
                    pass
            for kind in KINDS:  # warm-up: first imports, first connections, first session rows
                await one_turn(tg, kind, files)
            latencies: dict[str, list[float]] = {k: [] for k in KINDS}
            cpu: dict[str, list[float]] = {k: [] for k in KINDS}
            for _ in range(rounds):
                for kind in KINDS:
                    start = cpu_s(child.pid)
                    for _ in range(per_batch):
                        latencies[kind].append(await one_turn(tg, kind, files))
                    cpu[kind].append((cpu_s(child.pid) - start) / per_batch)
        finally:
            child.stdin.close()
            await child.wait()
            await tg.stop()
            await llm.stop()
    return summary(latencies, cpu, files, rounds, per_batch)


def summary(
    latencies: dict[str, list[float]], cpu: dict[str, list[float]], files: dict[str, bytes], rounds: int, per: int
) -> dict[str, Any]:
    base_ms = statistics.median(latencies["text"]) * 1000
    base_cpu = statistics.fmean(cpu["text"]) * 1000  # the clock ticks every 10 ms: a mean over every batch
    out: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "turns_per_kind": rounds * per,
        "sizes": {k: len(v) for k, v in files.items()},
        "kinds": {},
    }
    for kind in KINDS:
        ms = sorted(x * 1000 for x in latencies[kind])
        cpu_ms = statistics.fmean(cpu[kind]) * 1000
        out["kinds"][kind] = {
            "latency_p50_ms": round(statistics.median(ms), 1),
            "latency_p90_ms": round(ms[min(len(ms) - 1, round(0.9 * (len(ms) - 1)))], 1),
            "added_p50_ms": round(statistics.median(ms) - base_ms, 1),
            "cpu_ms_per_turn": round(cpu_ms, 1),
            "added_cpu_ms": round(cpu_ms - base_cpu, 1),
        }
    return out


def markdown(result: dict[str, Any]) -> str:
    sizes = result["sizes"]
    what = {
        "text": "text message",
        "photo": f"photo, JPEG 1600x1200, {sizes['photo'] // 1000} KB",
        "voice": f"voice note, 14 s, {sizes['voice'] // 1000} KB",
        "pdf": f"PDF, 3 pages, {sizes['pdf'] // 1000} KB",
    }
    lines = [
        f"{result['machine']}; {result['turns_per_kind']} turns of each kind.",
        "",
        "| turn | latency p50 | p90 | added to a text turn | gateway CPU per turn | added CPU |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for kind, row in result["kinds"].items():
        lines.append(
            f"| {what[kind]} | {row['latency_p50_ms']} ms | {row['latency_p90_ms']} ms | {row['added_p50_ms']:+} ms "
            f"| {row['cpu_ms_per_turn']} ms | {row['added_cpu_ms']:+} ms |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-batch", type=int, default=6)
    parser.add_argument("--json", metavar="PATH", help="also write the result as JSON")
    parser.add_argument("--serve", metavar="CONFIG", help=argparse.SUPPRESS)  # the gateway's process
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(json.loads(Path(args.serve).read_text())))
        return
    result = asyncio.run(run(args.rounds, args.per_batch))
    print(markdown(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
