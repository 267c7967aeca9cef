#!/usr/bin/env python3
"""Gateway overhead per turn, measured against a zero-latency fake LLM.

    .venv/bin/python benchmarks/turn_overhead.py            # full run (about 90 s on 2 cores)
    .venv/bin/python benchmarks/turn_overhead.py --quick    # a short run (about 35 s)
    .venv/bin/python benchmarks/turn_overhead.py --model openai/gpt-4o-mini  # a model LiteLLM can price
    .venv/bin/python benchmarks/turn_overhead.py --json     # JSON instead of Markdown on stdout
    .venv/bin/python benchmarks/turn_overhead.py --json out.json   # Markdown on stdout, JSON to a file
    .venv/bin/python benchmarks/turn_overhead.py --profile gw.pstats  # + a cProfile of the gateway
    .venv/bin/python benchmarks/turn_overhead.py --transport litellm  # every call via litellm.acompletion
    .venv/bin/python benchmarks/turn_overhead.py --memories 10000 --embeddings  # a person with 10,000 memories

Three processes, so that each one's CPU is counted apart:
  * the fake LLM: a minimal OpenAI-compatible aiohttp server (JSON and SSE, answers at once);
  * the gateway: `Gateway(config)` with SQLite in a temporary directory and the web channel on
    port 0; its CPU time (all threads) and RSS are read from /proc/<pid>;
  * this process: the load generator (aiohttp, POST /api/v1/messages, one conversation id per
    session) and the orchestration. The baselines (bare LiteLLM and plain aiohttp calls to the
    same fake) run in a fourth, short-lived process, before the gateway starts.

"Gateway's own work" = gateway CPU per turn - the CPU of the model call a REST turn makes, measured
apart exactly as the gateway makes it (`LLMClient.stream`, one JSON answer, same prompt shape and
tools, same transport: direct OpenAI wire by default, `--transport litellm` for litellm.acompletion).

Memory: by default the bench user has no long-term memories, so recall finds nothing and costs
little. `--memories N` gives them N personal memories before the gateway starts (a fourth child,
"seed": the texts are recall_scale's wordings of LoCoMo's dialog turns, read from
../shared/bench/locomo10.json, imported through `RecordStore.import_batch` and, with `--embeddings`,
embedded by the gateway's own upkeep, `TurnRecall.caught_up`, with recall_scale's vector cache), and
each turn then asks one of LoCoMo's questions instead of "benchmark message i", so that every turn's
recall has thousands of candidates to rank. The scenarios are the same: one session, 20 sessions
(20 clients, each in its own conversation of the one user) and 100 sessions.

The children run with PYTHONHASHSEED=0 unless it is set. The machine's other load is reported per
scenario ("other procs", in cores): a run next to a busy test suite is not comparable.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import asyncio
import contextlib
import json
import platform
import re
import sys
import tempfile
import time
import zlib
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TOKEN = "bench-token-0123456789abcdef"
BENCH_USER = "bench"
API_KEY = "sk-bench-not-a-real-key-000000"
MODEL = "openai/fake-model"  # --model changes it (a model LiteLLM knows prices differently)
TRANSPORT = "auto"  # --transport litellm sends every model call through litellm.acompletion
SESSION_MESSAGES = 40
MEMORY = True  # --no-memory: memory.enabled false (no recall, no Memory.md), to see what memory costs
EMBEDDINGS = False  # --embeddings: memory.search.provider local, as `make run`'s config.yaml
QUESTIONS: list[str] = []  # --memories: what the turns ask (LoCoMo's questions), else "benchmark message i"
REPLY = "This is the fake model's reply to your benchmark message."
REPLY_CHUNKS = 4
MODEL_DELAY_S = 0.0  # how long the fake model thinks before it answers (benchmarks/formation.py sets it)
CLK_TCK = os.sysconf("SC_CLK_TCK")

SCENARIOS = {"1-session": 1, "20-sessions": 20, "100-sessions": 100}  # name: concurrent sessions
TARGETS = {
    "own_cpu_ms": 2.0,  # gateway CPU per turn beyond the model call it makes
    "one_session_p50_ms": 10.0,
    "turns_per_s": 150.0,
    "startup_ready_s": 3.0,
    "rss_mib": 350.0,
}
# With --memories (a person with 10,000 memories, 20 clients in their own conversations of that person).
MEMORY_TARGETS = {"cpu_ms": 12.0, "turns_per_s": 150.0, "peak_rss_mib": 350.0}


# ---------------------------------------------------------------------------------------------
# Process 1: the fake LLM
# ---------------------------------------------------------------------------------------------


def _split(text: str, n: int) -> list[str]:
    size = -(-len(text) // n)
    return [text[i : i + size] for i in range(0, len(text), size)]


def answer(body: dict[str, Any]) -> str:
    """What the fake model says to a request (benchmarks/formation.py answers some requests otherwise)."""
    return REPLY


async def _fake_completions(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    text = answer(body)
    if MODEL_DELAY_S:
        await asyncio.sleep(MODEL_DELAY_S)
    model = body.get("model", "fake-model")
    cid = f"chatcmpl-{os.urandom(6).hex()}"
    created = int(time.time())
    usage = {"prompt_tokens": 10, "completion_tokens": 12, "total_tokens": 22}
    if not body.get("stream"):
        return web.json_response(
            {
                "id": cid,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": usage,
            }
        )

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": piece}) for piece in _split(text, REPLY_CHUNKS)]
    chunks.append(chunk({}, "stop"))
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append(
            {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [],
                "usage": usage,
            }
        )
    payload = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    await resp.write(payload)
    await resp.write_eof()
    return resp


async def fake_main() -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _fake_completions)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(json.dumps({"port": port}), flush=True)
    await _until_stdin_closes()
    await runner.cleanup()


async def _until_stdin_closes(on_line: Callable[[str], None] | None = None) -> None:
    """Wait for EOF on stdin (the parent closed it or died); pass each line to `on_line`."""
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    fd = sys.stdin.fileno()
    buf = bytearray()

    def readable() -> None:
        data = os.read(fd, 4096)
        if not data:
            loop.remove_reader(fd)
            done.set()
            return
        buf.extend(data)
        while b"\n" in buf:
            line, _, rest = bytes(buf).partition(b"\n")
            buf[:] = rest
            if on_line is not None:
                on_line(line.decode())

    loop.add_reader(fd, readable)
    await done.wait()


# ---------------------------------------------------------------------------------------------
# Process 2: the gateway
# ---------------------------------------------------------------------------------------------


def gateway_config_data(api_base: str, data_dir: str) -> dict[str, Any]:
    return {
        "ai": {
            "model": MODEL,
            "api_base": api_base,
            "api_key": API_KEY,
            "timeout_seconds": 30,
            "transport": TRANSPORT,
        },
        "storage": {"data_dir": data_dir},
        "channels": {"web": {"host": "127.0.0.1", "port": 0}},
        "users": {BENCH_USER: {"roles": ["user"], "tokens": [TOKEN]}},
        "logging": {"level": "WARNING"},
        # Sessions hold at most 40 messages (then they are summarized, by the fake, and cut to 24):
        # one long benchmark session keeps a realistic context instead of growing for 1000 turns.
        "memory": {
            "enabled": MEMORY,
            "session_memory": {"max_tokens": 0, "messages": SESSION_MESSAGES},
            "search": {"provider": "local" if EMBEDDINGS else None},
        },
    }


async def gateway_main(api_base: str, data_dir: str) -> None:
    import cProfile

    from gateway.app import Gateway
    from gateway.config.load import parse_config

    gw = Gateway(parse_config(gateway_config_data(api_base, data_dir), "benchmark", env={}), own_process=True)
    await gw.start()
    print(json.dumps({"url": gw.url}), flush=True)
    profiler: list[cProfile.Profile] = []

    db_thread = getattr(gw.storage.db if gw.storage else None, "_executor", None)
    # CPU time of each thread, not wall time: a wall-clock profile charges a function for the time its
    # thread waited for the GIL (the database thread's Python work), which hides where CPU goes.
    db_profiler = cProfile.Profile(time.thread_time)

    def command(line: str) -> None:  # the parent's profiling switch
        verb, _, arg = line.strip().partition(" ")
        if verb == "profile-start":
            profiler.append(cProfile.Profile(time.thread_time))
            profiler[-1].enable()
            if db_thread is not None:  # cProfile follows one thread: the database's gets its own
                db_thread.submit(db_profiler.enable).result()
        elif verb == "profile-stop" and profiler:
            p = profiler.pop()
            p.disable()
            p.dump_stats(arg)
            if db_thread is not None:
                db_thread.submit(db_profiler.disable).result()
                db_profiler.dump_stats(arg + ".db")
            print(json.dumps({"profile": arg}), flush=True)

    await _until_stdin_closes(command)
    await gw.stop()


async def seed_main(data_dir: str, count: int) -> None:
    """--memories: `count` personal memories of the bench user, written before the gateway starts."""
    import recall_scale as rs

    from gateway.config.load import parse_config
    from memory.records.fields import NewRecord
    from memory.records.model import Provenance, ReviewStatus, UsePolicy
    from memory.store.storage import Storage

    turns, _ = rs.load_locomo(rs.DATA)
    texts = rs.memory_texts(turns, count)
    config = parse_config(gateway_config_data("http://127.0.0.1:9/v1", data_dir), "benchmark", env={})
    storage = await Storage.open(config.storage.resolved_database_url)
    try:
        anchor = datetime.now(UTC)
        for at in range(0, count, rs.IMPORT_BATCH):
            batch = []
            for i in range(at, min(count, at + rs.IMPORT_BATCH)):
                memory_class, created = rs._created(i, anchor)
                text, speaker = texts[i]
                batch.append(
                    NewRecord(
                        text,
                        memory_class,
                        Provenance.IMPORTED,
                        UsePolicy(),
                        f"personal:{BENCH_USER}",
                        BENCH_USER,
                        ReviewStatus.NONE,
                        attribution=speaker,
                        created_at=created,
                    )
                )
            await storage.records.import_batch(batch, now=anchor)
        embedded = 0
        if EMBEDDINGS:
            inner = rs.local_embedder()
            cache = rs.VectorCache(inner.model_id)
            embedder = rs.BenchEmbedder(inner, cache)
            recall = rs.build_recall(config, storage, embedder)
            recall.start()
            await recall.caught_up(timeout=3600)
            await recall.stop()
            cache.save()
            embedded = embedder.by_model
    finally:
        await storage.close()
    print(json.dumps({"memories": count, "embedded_by_model": embedded}), flush=True)


# ---------------------------------------------------------------------------------------------
# Process 3 (short-lived): baselines
# ---------------------------------------------------------------------------------------------


def gateway_shaped_prompt(history_turns: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The messages and tools the gateway sends after `history_turns` turns in a conversation."""
    from gateway.config.load import parse_config
    from gateway.turn.engine import build_messages
    from gateway.turn.tools import ToolRegistry
    from memory.store.sessions import Message

    config = parse_config(gateway_config_data("http://127.0.0.1:9/v1", "/nonexistent"), "benchmark", env={})
    agent = config.agent(None)
    assert agent is not None
    history: list[Message] = []
    for i in range(history_turns):
        history += [Message("user", f"benchmark message {i}", author="web:bench"), Message("assistant", REPLY)]
    history = history[-SESSION_MESSAGES:]
    messages = build_messages(agent, history, [Message("user", "benchmark message", author="web:bench")])
    tools = ToolRegistry().schemas() if config.ai.max_tool_rounds > 0 else None
    return messages, tools or None


async def _measure(name: str, call: Callable[[], Awaitable[None]], n: int, warmup: int) -> dict[str, Any]:
    for _ in range(warmup):
        await call()
    lat: list[float] = []
    cpu0, t0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        s = time.perf_counter()
        await call()
        lat.append(time.perf_counter() - s)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {"name": name, "calls": n, "per_s": n / wall, "cpu_ms": cpu * 1000 / n, **_latency(lat)}


async def baseline_main(api_base: str, calls: int, history_turns: int) -> None:
    from gateway.llm.client import Completion, LLMClient, ModelSpec

    t0 = time.perf_counter()
    litellm = LLMClient._import()  # the gateway's own litellm settings
    import_s = time.perf_counter() - t0
    spec = ModelSpec(model=MODEL, api_base=api_base, api_key=API_KEY)
    bare_msgs = [{"role": "user", "content": "benchmark message"}]
    gw_msgs, gw_tools = gateway_shaped_prompt(history_turns)
    url = api_base.rstrip("/") + "/chat/completions"
    headers = {"Authorization": f"Bearer {API_KEY}"}

    async def litellm_json() -> None:
        r = await litellm.acompletion(model=MODEL, api_base=api_base, api_key=API_KEY, messages=bare_msgs)
        assert r.choices[0].message.content == REPLY

    async def litellm_stream() -> None:
        r = await litellm.acompletion(model=MODEL, api_base=api_base, api_key=API_KEY, messages=bare_msgs, stream=True)
        text = [c.choices[0].delta.content or "" async for c in r if c.choices]
        assert "".join(text) == REPLY

    def through_client(transport: str, stream: bool) -> Callable[[], Awaitable[None]]:
        # Exactly the model call a turn makes: LLMClient.stream with the gateway's kwargs, prompt and tools.
        client = LLMClient(timeout=30, retries=0, transport=transport)
        clients.append(client)

        async def call() -> None:
            last = None
            async for ev in client.stream([spec], gw_msgs, gw_tools, stream=stream):
                last = ev
            assert isinstance(last, Completion) and last.text == REPLY, last

        return call

    clients: list[LLMClient] = []
    async with aiohttp.ClientSession() as http:

        async def aiohttp_json() -> None:
            body = {"model": "fake-model", "messages": bare_msgs}
            async with http.post(url, json=body, headers=headers) as r:
                data = await r.json()
            assert data["choices"][0]["message"]["content"] == REPLY

        async def aiohttp_stream() -> None:
            body = {
                "model": "fake-model",
                "messages": bare_msgs,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            parts = []
            async with http.post(url, json=body, headers=headers) as r:
                async for line in r.content:
                    if line.startswith(b"data: ") and line[6:].strip() != b"[DONE]":
                        chunk = json.loads(line[6:])
                        if chunk["choices"]:
                            parts.append(chunk["choices"][0]["delta"].get("content") or "")
            assert "".join(parts) == REPLY

        warm = max(10, calls // 10)
        busy0, own0, wall0 = machine_busy_s(), time.process_time(), time.perf_counter()
        results = [
            await _measure("aiohttp_json", aiohttp_json, calls, warm),
            await _measure("aiohttp_stream", aiohttp_stream, calls, warm),
            await _measure("litellm_json", litellm_json, calls, warm),
            await _measure("litellm_stream", litellm_stream, calls, warm),
            await _measure("call_stream_litellm", through_client("litellm", True), calls, warm),
            await _measure("call_json_litellm", through_client("litellm", False), calls, warm),
            await _measure("call_stream_direct", through_client("auto", True), calls, warm),
            await _measure("call_json_direct", through_client("auto", False), calls, warm),
        ]
        for client in clients:
            await client.aclose()
    wall = time.perf_counter() - wall0
    others_cores = max(0.0, machine_busy_s() - busy0 - (time.process_time() - own0)) / wall
    try:
        storage: dict[str, float] | str = await storage_ops(calls)
    except Exception as exc:  # the storage API moves; the rest of the benchmark still stands
        storage = f"failed: {type(exc).__name__}: {exc}"
    print(
        json.dumps(
            {
                "import_s": import_s,
                "litellm_version": _litellm_version(),
                "results": results,
                "others_cores": others_cores,
                "storage": storage,
            }
        ),
        flush=True,
    )


async def storage_ops(n: int) -> dict[str, float]:
    """CPU per call of the storage operations a REST turn makes (SQLite in a temporary directory)."""
    import uuid

    from memory.store.sessions import Message
    from memory.store.storage import Storage

    with tempfile.TemporaryDirectory(prefix="clawgate-bench-db-") as tmp:
        st = await Storage.open(f"sqlite:///{tmp}/bench.sqlite3")
        try:
            await st.identities.sync_declared([("bench", ["user"], ["web:bench", "api:bench"])])
            key = "web:dm:bench:storage"
            ops: dict[str, float] = {}

            def timed(name: str, t0: float) -> None:
                ops[name] = ops.get(name, 0.0) + time.process_time() - t0

            async def turn(i: int) -> None:
                eid = f"web:bench:{uuid.uuid4().hex}"
                t0 = time.process_time()
                await st.journal.record(eid, "web", key, {"event_id": eid, "text": f"benchmark message {i}"})
                timed("journal.record (insert inbound event)", t0)
                t0 = time.process_time()
                await st.identities.resolve("web:bench", "bench")
                timed("identities.resolve", t0)
                t0 = time.process_time()
                state = await st.sessions.active(key, "default", "bench")
                timed("sessions.active (cached)", t0)
                t0 = time.process_time()
                msgs = [
                    Message("user", f"benchmark message {i}", author="web:bench", event_id=eid),
                    Message("assistant", REPLY),
                ]
                # Web replies are not claimed in the outbound journal (no durable sends), so no `sent`.
                await st.sessions.append(state, msgs, finish_event=eid)
                timed("sessions.append (2 messages + finish)", t0)

            for i in range(max(10, n // 10)):
                await turn(i)
            ops.clear()
            for i in range(n):
                await turn(i)
            out = {k: v * 1000 / n for k, v in ops.items()}
            out["total per turn"] = sum(out.values())
            t0 = time.process_time()
            for _ in range(n):
                await st.ping()
            out["storage.ping (each /readyz)"] = (time.process_time() - t0) * 1000 / n
            return out
        finally:
            await st.close()


def _litellm_version() -> str:
    from importlib.metadata import version

    try:
        return version("litellm")
    except Exception:
        return "?"


# ---------------------------------------------------------------------------------------------
# Process 0: orchestration and load
# ---------------------------------------------------------------------------------------------


def _latency(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)

    def q(p: float) -> float:
        return s[min(len(s) - 1, round(p * (len(s) - 1)))] * 1000 if s else float("nan")

    return {"p50_ms": q(0.50), "p90_ms": q(0.90), "p99_ms": q(0.99), "max_ms": q(1.0)}


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of stat(5)


def machine_busy_s() -> float:
    """CPU seconds all processes used so far (user+nice+system+irq+softirq+steal over every core)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def proc_mem_mib(pid: int) -> dict[str, float]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) / 1024
    return {"rss_mib": out.get("VmRSS", float("nan")), "peak_rss_mib": out.get("VmHWM", float("nan"))}


class Child:
    """A role of this script in a subprocess; its first stdout line is a JSON hello."""

    def __init__(self, role: str, *args: str, log: Path) -> None:
        self.argv = [sys.executable, str(Path(__file__).resolve()), "--role", role, "--model", MODEL]
        flags = [*([] if MEMORY else ["--no-memory"]), *(["--embeddings"] if EMBEDDINGS else [])]
        self.argv += ["--transport", TRANSPORT, *flags, *args]
        self.log = log
        self.proc: asyncio.subprocess.Process | None = None
        self.spawned = 0.0

    async def start(self, timeout: float = 60) -> dict[str, Any]:
        self.spawned = time.perf_counter()
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=self.log.open("ab"),
            cwd=str(ROOT),
            env={**os.environ, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")},
        )
        return await self.read(timeout)

    async def read(self, timeout: float = 60) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        async with asyncio.timeout(timeout):
            line = await self.proc.stdout.readline()
        if not line:
            await self.proc.wait()
            tail = self.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{' '.join(self.argv[2:])} exited with {self.proc.returncode}:\n{tail}")
        return json.loads(line)

    def send(self, line: str) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def stop(self, timeout: float = 20) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            async with asyncio.timeout(timeout):
                await self.proc.wait()
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()


async def post_turn(http: aiohttp.ClientSession, url: str, conv: str, i: int) -> str | None:
    """One turn through the REST API; None when it worked, else what went wrong."""
    text = QUESTIONS[(i + zlib.crc32(conv.encode())) % len(QUESTIONS)] if QUESTIONS else f"benchmark message {i}"
    body = {"text": text, "conversation": conv}
    try:
        async with http.post(f"{url}/api/v1/messages", json=body, headers={"Authorization": f"Bearer {TOKEN}"}) as r:
            data = await r.json(content_type=None)
            if r.status != 200:
                return f"HTTP {r.status}: {str(data)[:200]}"
            if data.get("reply") != REPLY:
                return f"unexpected reply: {str(data.get('reply'))[:200]}"
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


async def must_turn(http: aiohttp.ClientSession, url: str, conv: str, i: int) -> None:
    err = await post_turn(http, url, conv, i)
    if err is not None:
        raise RuntimeError(f"warm-up turn failed: {err}")


def logged_errors(log: Path) -> list[str]:
    """What the children logged at ERROR (the gateway logs at WARNING), each line with the traceback
    under it: the cause of failed turns."""
    out: list[str] = []
    inside = False
    for line in log.read_text(errors="replace").splitlines():
        if re.match(r"\d{4}-\d\d-\d\d ", line):  # a new log line
            inside = " ERROR " in line
        if inside:
            out.append(line)
    return out


def _progress(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


async def scenario(
    http: aiohttp.ClientSession, url: str, name: str, sessions: int, turns: int, pids: dict[str, int]
) -> dict[str, Any]:
    per_session = max(1, -(-turns // sessions))
    convs = [f"bench-{name}-{i}" for i in range(sessions)]
    # Warm-up, not measured: the first turn of a session creates its row and its cache entry.
    await asyncio.gather(*(must_turn(http, url, c, -1) for c in convs))
    lat: list[float] = []
    errors: list[str] = []

    async def session(conv: str) -> None:
        for i in range(per_session):
            s = time.perf_counter()
            err = await post_turn(http, url, conv, i)
            if err is None:
                lat.append(time.perf_counter() - s)
            else:
                errors.append(err)

    _progress(f"{name}: {sessions} session(s), {per_session * sessions} turns")
    cpu0 = {k: proc_cpu_s(p) for k, p in pids.items()}
    busy0 = machine_busy_s()
    t0 = time.perf_counter()
    await asyncio.gather(*(session(c) for c in convs))
    wall = time.perf_counter() - t0
    cpu = {k: proc_cpu_s(p) - cpu0[k] for k, p in pids.items()}
    others = max(0.0, machine_busy_s() - busy0 - sum(cpu.values()))
    n = max(1, len(lat) + len(errors))
    if errors:
        _progress(f"{name}: {len(errors)} failed turns, first: {errors[0]}")
    return {
        "name": name,
        "sessions": sessions,
        "turns": len(lat),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "seconds": wall,
        "turns_per_s": len(lat) / wall,
        **_latency(lat),
        "gateway_cpu_ms": cpu["gateway"] * 1000 / n,
        "fake_llm_cpu_ms": cpu["fake_llm"] * 1000 / n,
        "loadgen_cpu_ms": cpu["loadgen"] * 1000 / n,
        "gateway_cpu_util": cpu["gateway"] / wall,
        # Other processes on the machine during the run, in cores: well above 0 means a disturbed run.
        "other_processes_cores": others / wall,
    }


async def wait_ready(http: aiohttp.ClientSession, url: str, child: Child, *, model: bool) -> float:
    while True:
        try:
            async with http.get(f"{url}/readyz") as r:
                detail = await r.json()
                if r.status == 200 and (not model or detail.get("model_loaded")):
                    return time.perf_counter() - child.spawned
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.005)


async def orchestrate(args: argparse.Namespace) -> dict[str, Any]:
    turns = args.turns or (200 if args.quick else 1000)
    profile_path = args.profile  # made absolute by main()
    calls = args.calls or (100 if args.quick else 400)
    with tempfile.TemporaryDirectory(prefix="clawgate-bench-") as tmp:
        log = Path(tmp) / "children.log"
        fake = Child("fake", log=log)
        port = (await fake.start())["port"]
        api_base = f"http://127.0.0.1:{port}/v1"
        gateway: Child | None = None
        try:
            # History the gateway's prompt carries in the 100-session scenario (warm-up + turns/100).
            history = 1 + -(-turns // 100)
            base_child = Child(
                "baseline", "--api-base", api_base, "--calls", str(calls), "--history", str(history), log=log
            )
            baseline = await base_child.start(timeout=300)
            await base_child.stop()

            seeded = None
            if args.memories:
                _progress(f"seeding {args.memories:,} memories{' and their vectors' if EMBEDDINGS else ''}")
                seed = Child("seed", "--data-dir", str(Path(tmp) / "data"), "--memories", str(args.memories), log=log)
                seeded = await seed.start(timeout=3600)
                await seed.stop()
            gateway = Child("gateway", "--api-base", api_base, "--data-dir", str(Path(tmp) / "data"), log=log)
            url = (await gateway.start())["url"]
            pids = {"gateway": gateway.pid, "fake_llm": fake.pid, "loadgen": os.getpid()}
            connector = aiohttp.TCPConnector(limit=0, force_close=False)
            timeout = aiohttp.ClientTimeout(total=60)
            async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
                ready_s = await wait_ready(http, url, gateway, model=False)
                model_s = await wait_ready(http, url, gateway, model=True)
                startup_cpu_s = proc_cpu_s(gateway.pid)
                startup_rss = proc_mem_mib(gateway.pid)["rss_mib"]
                t = time.perf_counter()
                await must_turn(http, url, "bench-first", 0)
                first_turn_ms = (time.perf_counter() - t) * 1000
                # Warm-up: a little of everything so lazy imports and caches are settled.
                await asyncio.gather(*(must_turn(http, url, f"bench-warm-{i}", 0) for i in range(20)))
                scenarios = [
                    await scenario(http, url, name, SCENARIOS[name], turns, pids)
                    for name in SCENARIOS
                    if name in args.scenarios
                ]
                mem = proc_mem_mib(gateway.pid)
                profile = None
                if args.profile:
                    gateway.send("profile-start")
                    await scenario(http, url, "profiled", 100, turns, pids)
                    gateway.send(f"profile-stop {profile_path}")
                    profile = (await gateway.read())["profile"]
        finally:
            if gateway is not None:
                await gateway.stop()
            await fake.stop()
        error_lines = logged_errors(log)

    lite = {r["name"]: r for r in baseline["results"]}
    # REST turns ask for one JSON answer, through the transport the gateway uses: the model call's share.
    call_cpu = lite[f"call_json_{'litellm' if TRANSPORT == 'litellm' else 'direct'}"]["cpu_ms"]
    return {
        "environment": {
            "python": platform.python_version(),
            "litellm": baseline["litellm_version"],
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "turns": turns,
            "baseline_calls": calls,
            "prompt_history_turns": history,
            "model": MODEL,
            "transport": TRANSPORT,
            "memory": MEMORY,
            "embeddings": EMBEDDINGS,
            "memories": args.memories,
            "seeded": seeded,
        },
        "startup": {
            "ready_s": ready_s,
            "model_loaded_s": model_s,
            "first_turn_ms": first_turn_ms,
            "cpu_s_to_model_loaded": startup_cpu_s,
            "rss_mib_at_ready": startup_rss,
            "litellm_import_s_in_baseline": baseline["import_s"],
        },
        "scenarios": scenarios,
        "baselines": baseline["results"],
        "baseline_other_processes_cores": baseline["others_cores"],
        "own_work_cpu_ms": {s["name"]: s["gateway_cpu_ms"] - call_cpu for s in scenarios},
        "own_work_vs_bare_json_cpu_ms": {
            s["name"]: s["gateway_cpu_ms"] - lite["litellm_json"]["cpu_ms"] for s in scenarios
        },
        "memory": mem,
        "storage_ops_cpu_ms": baseline.get("storage"),
        "error_log": error_lines[:20],
        "profile": profile,
    }


def targets(res: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    sc = {s["name"]: s for s in res["scenarios"]}
    if res["environment"]["memories"]:
        return memory_targets(res, sc.get("20-sessions"))
    own = max(res["own_work_cpu_ms"].values())
    out = [
        (
            "gateway's own CPU per turn beyond the model call (worst scenario)",
            f"< {TARGETS['own_cpu_ms']:g} ms",
            f"{own:.2f} ms",
            own < TARGETS["own_cpu_ms"],
        )
    ]
    if "1-session" in sc:
        out.append(
            (
                "one session: p50 end-to-end latency",
                f"< {TARGETS['one_session_p50_ms']:g} ms",
                f"{sc['1-session']['p50_ms']:.2f} ms",
                sc["1-session"]["p50_ms"] < TARGETS["one_session_p50_ms"],
            )
        )
    if "100-sessions" in sc:
        out.append(
            (
                "throughput through the REST API (100 sessions)",
                f">= {TARGETS['turns_per_s']:g} turns/s",
                f"{sc['100-sessions']['turns_per_s']:.0f} turns/s",
                sc["100-sessions"]["turns_per_s"] >= TARGETS["turns_per_s"],
            )
        )
    return [
        *out,
        (
            "start-up to /readyz 200",
            f"< {TARGETS['startup_ready_s']:g} s",
            f"{res['startup']['ready_s']:.2f} s",
            res["startup"]["ready_s"] < TARGETS["startup_ready_s"],
        ),
        (
            "gateway RSS at end",
            f"< {TARGETS['rss_mib']:g} MiB",
            f"{res['memory']['rss_mib']:.0f} MiB",
            res["memory"]["rss_mib"] < TARGETS["rss_mib"],
        ),
    ]


def memory_targets(res: dict[str, Any], shape: dict[str, Any] | None) -> list[tuple[str, str, str, bool]]:
    """The targets of a run with --memories: measured in the 20-session scenario."""
    peak = res["memory"]["peak_rss_mib"]
    out = [
        (
            "peak gateway RSS",
            f"<= {MEMORY_TARGETS['peak_rss_mib']:g} MiB",
            f"{peak:.0f} MiB",
            peak <= MEMORY_TARGETS["peak_rss_mib"],
        )
    ]
    if shape is None:
        return out
    return [
        (
            "gateway CPU per turn (20 sessions)",
            f"<= {MEMORY_TARGETS['cpu_ms']:g} ms",
            f"{shape['gateway_cpu_ms']:.2f} ms",
            shape["gateway_cpu_ms"] <= MEMORY_TARGETS["cpu_ms"],
        ),
        (
            "throughput (20 sessions)",
            f">= {MEMORY_TARGETS['turns_per_s']:g} turns/s",
            f"{shape['turns_per_s']:.0f} turns/s",
            shape["turns_per_s"] >= MEMORY_TARGETS["turns_per_s"],
        ),
        *out,
    ]


def markdown(res: dict[str, Any]) -> str:
    env, st = res["environment"], res["startup"]
    out = [
        f"## clawgate turn overhead (zero-latency fake LLM)\n\n"
        f"Python {env['python']}, LiteLLM {env['litellm']}, {env['cpus']} CPUs, model `{env['model']}`, "
        f"transport `{env['transport']}`; "
        f"{env['turns']} turns per scenario, {env['baseline_calls']} calls per baseline.\n",
        "### Gateway, POST /api/v1/messages\n",
        "| scenario | turns | errors | turns/s | p50 ms | p90 ms | p99 ms | gateway CPU ms/turn "
        "| own work ms/turn | gateway CPU util | fake LLM CPU ms/turn | load gen CPU ms/turn | other procs (cores) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in res["scenarios"]:
        out.append(
            f"| {s['name']} | {s['turns']} | {s['errors']} | {s['turns_per_s']:.0f} | {s['p50_ms']:.2f} | "
            f"{s['p90_ms']:.2f} | "
            f"{s['p99_ms']:.2f} | {s['gateway_cpu_ms']:.2f} | {res['own_work_cpu_ms'][s['name']]:.2f} | "
            f"{s['gateway_cpu_util'] * 100:.0f}% | {s['fake_llm_cpu_ms']:.2f} | {s['loadgen_cpu_ms']:.2f} | "
            f"{s['other_processes_cores']:.2f} |"
        )
    out += [
        "\n### Baselines (same fake, one call at a time, in a separate process)\n",
        f"Other processes (the fake LLM included) used {res['baseline_other_processes_cores']:.2f} cores meanwhile.\n",
        "| call | calls | calls/s | p50 ms | p99 ms | CPU ms/call |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for b in res["baselines"]:
        out.append(
            f"| {b['name']} | {b['calls']} | {b['per_s']:.0f} | {b['p50_ms']:.2f} | {b['p99_ms']:.2f} | "
            f"{b['cpu_ms']:.2f} |"
        )
    out += [
        "\n`call_*` rows are `LLMClient.stream`, the model call a turn makes, with the gateway's system "
        f"prompt, {env['prompt_history_turns']} earlier turns of history and the tool schemas: `stream` for "
        "chat pages and platforms that edit, `json` (one answer) for REST turns; `litellm` through "
        "`litellm.acompletion`, `direct` through `gateway/llm/openai_wire.py` (what `ai.transport: auto` uses "
        "for an OpenAI-compatible `api_base`). Own work = gateway CPU per turn - the `call_json_*` row of "
        "the run's transport. Against the bare `litellm_json` call instead: "
        + ", ".join(f"{k} {v:.2f} ms" for k, v in res["own_work_vs_bare_json_cpu_ms"].items())
        + ".",
    ]
    storage = res.get("storage_ops_cpu_ms")
    if isinstance(storage, dict):
        out += [
            "\n### Storage work of one REST turn (SQLite, same calls as the router, in the baseline process)\n",
            "| operation | CPU ms/call |",
            "|---|---:|",
        ]
        out += [f"| {k} | {v:.2f} |" for k, v in storage.items()]
    elif storage:
        out.append(f"\nStorage micro-benchmark {storage}")
    out += [
        "\n### Start-up and memory\n",
        "| measure | value |",
        "|---|---:|",
        f"| spawn to /readyz 200 | {st['ready_s']:.2f} s |",
        f"| spawn to LiteLLM loaded (readyz model_loaded) | {st['model_loaded_s']:.2f} s |",
        f"| first turn after load | {st['first_turn_ms']:.1f} ms |",
        f"| gateway CPU spent until LiteLLM loaded | {st['cpu_s_to_model_loaded']:.2f} s |",
        f"| RSS at model loaded | {st['rss_mib_at_ready']:.0f} MiB |",
        f"| RSS at end / peak | {res['memory']['rss_mib']:.0f} / {res['memory']['peak_rss_mib']:.0f} MiB |",
        "\n### Targets\n",
        "| target | goal | measured | met |",
        "|---|---|---:|:---:|",
    ]
    for name, goal, measured, ok in targets(res):
        out.append(f"| {name} | {goal} | {measured} | {'yes' if ok else '**no**'} |")
    if res.get("error_log"):
        out.append("\nErrors the gateway logged (first lines):\n\n```\n" + "\n".join(res["error_log"][:10]) + "\n```")
    if res.get("profile"):
        out.append(
            f"\ncProfile of the gateway (CPU time: the main thread, and the database thread in .db; an extra "
            f"100-session run) written to {res['profile']}"
        )
    return "\n".join(out)


def main() -> int:
    global MODEL, TRANSPORT, MEMORY, EMBEDDINGS
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--turns", type=int, default=None, help="turns per scenario (default 1000, --quick 200)")
    p.add_argument("--calls", type=int, default=None, help="calls per baseline (default 400, --quick 100)")
    p.add_argument("--quick", action="store_true", help="a short run")
    p.add_argument(
        "--json",
        nargs="?",
        const="-",
        default=None,
        metavar="PATH",
        help="JSON results: to stdout instead of Markdown, or to PATH (Markdown still printed)",
    )
    p.add_argument("--profile", metavar="PATH", help="also cProfile the gateway over an extra 100-session run")
    p.add_argument("--model", default=MODEL, help=f"LiteLLM model id sent to the fake (default {MODEL})")
    p.add_argument(
        "--transport",
        choices=["auto", "litellm"],
        default=TRANSPORT,
        help="the gateway's ai.transport (default auto: direct to the OpenAI-compatible fake)",
    )
    p.add_argument("--no-memory", action="store_true", help="memory.enabled: false in the gateway")
    p.add_argument(
        "--embeddings", action="store_true", help="memory.search.provider: local (the shipped config.yaml's recall)"
    )
    p.add_argument(
        "--memories",
        type=int,
        default=0,
        help="personal memories the user has (LoCoMo wordings; turns ask LoCoMo questions)",
    )
    p.add_argument(
        "--scenarios",
        type=lambda v: [x.strip() for x in v.split(",") if x.strip()],
        default=list(SCENARIOS),
        help=f"which scenarios, comma-separated (default all: {','.join(SCENARIOS)})",
    )
    p.add_argument("--role", choices=["fake", "gateway", "baseline", "seed"], help=argparse.SUPPRESS)
    p.add_argument("--api-base", help=argparse.SUPPRESS)
    p.add_argument("--data-dir", help=argparse.SUPPRESS)
    p.add_argument("--history", type=int, default=10, help=argparse.SUPPRESS)
    args = p.parse_args()
    MODEL = args.model
    TRANSPORT = args.transport
    MEMORY = not args.no_memory
    EMBEDDINGS = args.embeddings
    if args.role == "fake":
        asyncio.run(fake_main())
        return 0
    if args.role == "gateway":
        asyncio.run(gateway_main(args.api_base, args.data_dir))
        return 0
    if args.role == "seed":
        asyncio.run(seed_main(args.data_dir, args.memories))
        return 0
    if args.memories and args.role in (None, "gateway"):
        import recall_scale as rs

        QUESTIONS[:] = rs.load_locomo(rs.DATA)[1]
    if args.role == "baseline":
        asyncio.run(baseline_main(args.api_base, args.calls, args.history))
        return 0
    unknown = [n for n in args.scenarios if n not in SCENARIOS]
    if unknown:
        p.error(f"unknown scenario {', '.join(unknown)}; the scenarios are {', '.join(SCENARIOS)}")
    if args.profile:
        args.profile = str(Path(args.profile).resolve())
    res = asyncio.run(orchestrate(args))
    if args.json == "-":
        print(json.dumps(res, indent=2))
    else:
        print(markdown(res))
        if args.json:
            Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
