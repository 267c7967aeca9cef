"""Gateway lifecycle: storage, channels, the shared web server, the router, and shutdown."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web

import channels
from gateway.config.load import secret_values
from gateway.config.model import Config
from gateway.core.events import ConversationRef, MessageReceived, utcnow
from gateway.core.heap import limit_malloc_arenas
from gateway.core.logs import event, setup_logging
from gateway.core.metrics import Metrics
from gateway.core.ports import Adapter, ChannelServices, ConversationSummary, HistoryItem, RecordedReply
from gateway.jobs.consolidation import CONSOLIDATE_JOB, Consolidator
from gateway.jobs.formation import Formation
from gateway.jobs.merge import MERGE_JOB, Merger, scheduler_from_config
from gateway.jobs.runner import JobRunner
from gateway.llm.client import LLMClient, ModelSpec, llm_settings
from gateway.pairing_notice import PairingNotices
from gateway.recall.engine import TurnRecall, embedder_from_config
from gateway.recall.trace import TraceRecorder
from gateway.reload import Reloader
from gateway.reload_files import remove_pid_file, try_write_pid_file
from gateway.schedules.service import Schedules
from gateway.session.adjudicate import DEDUPE_JOB, Duplicates
from gateway.session.budget import SessionMemory
from gateway.session.memory_service import MemoryService
from gateway.session.memory_tools import consolidate_tool, memory_tools, search_archive_tool
from gateway.turn.commands.chat import COMMANDS
from gateway.turn.context import CoreFiles, PromptContext
from gateway.turn.delivery import Delivery
from gateway.turn.engine import COMMAND_ANSWER_AUTHOR, NOTICE_AUTHOR, TurnEngine, model_chain
from gateway.turn.router import Router
from gateway.turn.tools import CURRENT_TIME, ToolRegistry
from gateway.web import console
from gateway.web.auth import TokenAuth
from gateway.web.console.once import OnceLink, startup_lines
from gateway.web.console.service import ConsoleService
from gateway.web.openai_api import OpenAIApi
from gateway.web.server import add_ops_routes, build_app, host_policy, metrics_access
from memory.archive.daily import DailyFiles
from memory.archive.daily_index import DailyIndex
from memory.store.jobs import DONE
from memory.store.leases import SessionLeases
from memory.store.presets import PresetStore
from memory.store.storage import Storage
from memory.store.traces import TraceStore
from memory.store.write_check import WriteCheck

log = logging.getLogger("clawgate.app")


class Gateway:
    def __init__(
        self,
        config: Config,
        config_path: Path | None = None,
        *,
        own_process: bool = False,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        """`own_process`: the process is this gateway's own (`clawgate run`): its C heap keeps to two
        malloc arenas (gateway/core/heap.py), and what its start loaded leaves the garbage
        collector's walks (_freeze_heap).
        `clock`: what "now" is for scheduled work (the job queue, reminders): tests move it."""
        self.config = config
        self.clock = clock
        self.schedules: Schedules | None = None
        self._freeze = own_process
        if own_process:
            limit_malloc_arenas()
        self.metrics = Metrics()
        self.storage: Storage | None = None
        self.adapters: dict[str, Adapter] = {}
        self.router: Router | None = None
        self.session_memory: SessionMemory | None = None
        self.daily_index: DailyIndex | None = None
        self.recall: TurnRecall | None = None
        self.jobs: JobRunner | None = None
        self.formation: Formation | None = None
        self.consolidator: Consolidator | None = None
        self.traces: TraceRecorder | None = None
        self.llm = LLMClient(metrics=self.metrics, **llm_settings(config.ai))
        self.auth = TokenAuth(config)
        # One list, shared by every part that redacts or refuses secrets: a reload adds to it.
        self.secrets: list[str] = []
        self.openai_api: OpenAIApi | None = None
        self.console: ConsoleService | None = None
        self.once = OnceLink(clock)  # the console's one-time sign-in link while no user has a token
        self.pairing_notices: PairingNotices | None = None  # tells people their pairing was approved
        self.write_check: WriteCheck | None = None
        # With the file it came from, config.yaml is reloaded on SIGHUP or when it changes.
        self.reloader = Reloader(self, config_path) if config_path is not None else None
        self._runner: web.AppRunner | None = None
        self._sites: list[web.TCPSite] = []
        self._ready = False
        self._stopped = False
        self._background: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        self.started_at = time.time()

    # -- start / stop -----------------------------------------------------------------------------

    async def start(self) -> None:
        started = time.perf_counter()
        secrets = self.secrets
        secrets[:] = secret_values(self.config)
        logging_cfg = self.config.logging
        setup_logging(logging_cfg.level, secrets, fmt=logging_cfg.format, access_log=logging_cfg.access_log)
        for path, why in self.config.unread_keys():
            event(log, "config_key_ignored", logging.WARNING, key=path, why=why)
        storage = self.storage = await Storage.open(self.config.storage.resolved_database_url, secrets)
        await storage.identities.sync_declared(self.config.declared_users())

        web_cfgs = self.config.web_channels()
        max_body = max((c.max_message_bytes for c in web_cfgs.values()), default=64 * 1024) + 64 * 1024
        app = build_app(max_body, host_policy(self.config))
        services = ChannelServices(
            http=app,
            authenticate=self.auth,
            history=self._history,
            commands=tuple((c.name, c.summary) for c in COMMANDS.values()),
            accept=self._accept,
            replay=self._replay,
            conversations=storage.conversations,
            threads=self._threads,
            stop_turn=self._stop_turn,
        )
        for name, ch_cfg in self.config.channels.items():
            if getattr(ch_cfg, "enabled", True):
                self.adapters[name] = channels.create(name, ch_cfg, services)

        daily = DailyFiles(self.config.storage.data_dir / "memory", secrets)
        self.daily_index = DailyIndex(storage.db, daily)
        # Background work (DESIGN §8): each feature registers its job kinds on this runner below.
        self.jobs = JobRunner(storage.jobs, secrets=secrets, clock=self.clock)
        self.schedules = Schedules(self.config, storage, self.jobs, secrets, self.clock)  # docs/schedules.md
        self.session_memory = SessionMemory(self.config, storage, self.llm, daily, secrets, self.daily_index)
        memory = MemoryService(self.config, storage.records, secrets)
        embedder = embedder_from_config(self.config) if self.config.memory.enabled else None
        self.recall = TurnRecall(self.config, storage, memory, self.daily_index, embedder, secrets)
        memory.on_change = self.session_memory.on_change = self.recall.wake
        # Memory formation (DESIGN §6, §8): SessionMemory queues one job per archived range, the runner runs it.
        self.formation = Formation(self.config, storage, self.llm, self.session_memory, self.jobs, secrets)
        self.formation.register()
        self.formation.on_change = self.recall.wake
        self.session_memory.formation = self.formation.queue
        # Consolidation into Memory.md and the daily merge (DESIGN §8): their job kinds and the tool.
        session_memory = self.session_memory

        def chain() -> list[ModelSpec]:  # the first agent of the config in force (a reload may change it)
            return session_memory.background_chain(session_memory.config.agents.list[0])

        self.consolidator = Consolidator(self.config, storage, self.llm, daily, self.daily_index, secrets, chain)
        merger = Merger(storage.records, storage.revisions)
        self.consolidator.on_change = merger.on_change = self.recall.wake
        self.jobs.register(CONSOLIDATE_JOB, self.consolidator.handle_job)
        self.jobs.register(MERGE_JOB, merger.handle_job)
        # Near-duplicates of a new memory, adjudicated by the background model (docs/recall.md).
        duplicates = Duplicates(memory, storage.records, storage.revisions, self.llm, chain, secrets)
        duplicates.recall, duplicates.enqueue = self.recall, self.jobs.enqueue
        memory.dedupe, memory.revisions = duplicates.settle, storage.revisions
        self.formation.compare = duplicates.formed
        self.jobs.register(DEDUPE_JOB, duplicates.handle_job)
        tools = [CURRENT_TIME, *self.schedules.tools()]
        if self.config.memory.enabled:  # off entirely: no memory tool is even offered
            tools += [search_archive_tool(storage.archive), *memory_tools(memory)]
            tools.append(consolidate_tool(self.consolidator, self.jobs))
        engine = TurnEngine(self.config, self.llm, ToolRegistry(tools, PresetStore(storage.db, secrets)))
        core = CoreFiles(daily)
        self.traces = TraceRecorder(TraceStore(storage.db), secrets)
        self.formation.traces = self.traces.store
        self.router = Router(
            self.config,
            storage,
            engine,
            Delivery(storage.journal),
            self.adapters,
            self.metrics,
            self.session_memory,
            PromptContext(self.config, core),
            memory,
            self.recall,
            self.traces,
            self._leases(storage),
        )
        self.session_memory.leases = self.router.leases
        self.schedules.attach(self.router, app)
        self.router.schedules = self.schedules.scheduler
        self.openai_api = OpenAIApi(self.config, storage, engine, self.router, self.metrics, self.auth, max_body)
        self.openai_api.mount(app)
        traces = self.traces.store
        self.console = console.mount(
            app, self.config, storage, self.auth, memory, core, self.recall, traces, self.status, secrets, self.once
        )
        add_ops_routes(app, ready=self._readiness, metrics=self.metrics.render, metrics_access=metrics_access(web_cfgs))
        self.write_check = WriteCheck(storage.db, self.config.storage.data_dir, self._instance_name())

        # By the time stop() closes the server its turns have drained (router.drain): what is left is
        # an idle connection, or one aiohttp keeps reading after an answer that left its body unread
        # (a 413) for up to 10 s. Two seconds for those, not aiohttp's 60.
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
        await self._runner.setup()
        for name, ch_cfg in web_cfgs.items():
            site = web.TCPSite(self._runner, ch_cfg.host, ch_cfg.port, reuse_address=True)
            await site.start()
            self._sites.append(site)
            event(log, "web_listening", channel=name, url=self.url_for(site))
        # What a crash left unanswered goes first: its places in line are taken before any channel
        # can deliver a new message (with leases, the journal's order is kept by the sweep below).
        unfinished = await self.router.unfinished() if self.router.leases is None else []
        places = self.router.reserve(unfinished)
        for adapter in self.adapters.values():
            await adapter.start(self.router.handle)
        self._ready = True
        event(log, "gateway_ready", ms=(time.perf_counter() - started) * 1000, channels=",".join(self.adapters))
        # Heavy imports after ready: a turn that arrives meanwhile waits for them.
        self.llm.start_loading()
        self.session_memory.start()
        self.recall.start()  # loads the embedding model in the background: recall is lexical meanwhile
        self.jobs.start()
        await self.schedules.start()
        if self.config.memory.enabled and self.config.memory.merge.enabled:  # the daily merge, at memory.merge.at
            self._background.append(asyncio.create_task(scheduler_from_config(self.config, self.jobs.enqueue).run()))
        self._background.append(asyncio.create_task(self._maintenance()))
        self.pairing_notices = PairingNotices(storage.pairing, self.adapters, self.router.delivery)
        self._background.append(asyncio.create_task(self.pairing_notices.run()))
        self._background.append(asyncio.create_task(self._index_daily_files()))
        self._background.append(asyncio.create_task(self._check_models()))
        if self._freeze:
            self._background.append(asyncio.create_task(self._freeze_heap()))
        if self.reloader is not None:  # config.yaml changes apply without a restart (gateway/reload.py)
            self._background.append(asyncio.create_task(self.reloader.watch()))
        if self.router.leases is not None:  # several instances may share the database
            period = max(1.0, self.config.storage.session_lease_seconds / 3)
            self._background.append(asyncio.create_task(self.router.sweep_forever(period)))
        self._background.append(asyncio.create_task(self._watch_storage()))
        if self.router.leases is None:
            resumed = self.router.resume(unfinished, places)
        else:
            resumed = await self.router.resume_unfinished()
        if resumed:
            event(log, "gateway_resumed_events", count=resumed)

    async def _freeze_heap(self) -> None:
        """Once LiteLLM, the embedding model and the vectors are loaded, move every object the
        start made out of the garbage collector's sight (gc.freeze): they live as long as the
        process, yet each full collection walked them all. Measured (benchmarks/turn_overhead.py,
        10,000 memories, 1,000 turns): ~500k objects, 140 ms a full collection, 0.6 ms a turn saved.
        Only in a process of its own: a test or a host process starting several gateways would keep
        whatever cyclic garbage of theirs it froze."""
        try:
            await self.llm.ready()
        except Exception:  # LiteLLM failed to import: that is reported where it is used
            return
        if self.recall is not None:
            await self.recall.loaded()
        gc.collect()
        gc.freeze()
        event(log, "heap_frozen", objects=gc.get_freeze_count())

    def add_secrets(self, values: Sequence[str]) -> None:
        """Redact these too, from now on: the log filter, and every part sharing `self.secrets`
        (the daily files keep a copy of their own)."""
        self.secrets.extend(v for v in values if v not in self.secrets)
        setup_logging(self.config.logging.level, self.secrets)
        if self.session_memory is not None:
            self.session_memory.daily.secrets = tuple(self.secrets)

    async def apply_config(self, config: Config) -> None:
        """Hand `config` to every part of a started gateway that reads it. The only wait (declared
        users to the database) comes first; the swap itself has no await, so no turn sees half of it.
        A new part that keeps the config belongs here: tests/integration/test_reload.py walks the
        gateway's objects and names any still holding the old one."""
        router = self.router
        assert self.storage is not None and router is not None
        declared = config.declared_users()
        if declared != self.config.declared_users():
            await self.storage.identities.sync_declared(declared)
        self.config = config
        self.auth.use_config(config)
        self.llm.configure(**llm_settings(config.ai))
        router.use_config(config)
        router.engine.config = config
        router.context.config = config
        router.session_memory.use_config(config)
        if router.memory is not None:
            router.memory.use_config(config)
        if router.recall is not None:
            router.recall.use_config(config)
        if self.formation is not None:
            self.formation.use_config(config)
        if self.consolidator is not None:
            self.consolidator.config = config
        if self.openai_api is not None:
            self.openai_api.config = config
        if self.console is not None:
            self.console.config = config
        if self.schedules is not None:  # the schedules' rows follow in the background
            self.schedules.use_config(config)
            self._background.append(asyncio.create_task(self.schedules.reload()))

    async def _accept(self, ev: MessageReceived) -> bool:
        if self.router is None:
            raise RuntimeError("the gateway is not started")
        return await self.router.accept(ev)

    async def _replay(self, ev: MessageReceived) -> RecordedReply | None:
        if self.router is None:
            raise RuntimeError("the gateway is not started")
        return await self.router.replay(ev)

    def _instance_name(self) -> str:
        return self.config.storage.instance_name or f"{socket.gethostname()}:{os.getpid()}"

    def _leases(self, storage: Storage) -> SessionLeases | None:
        """Session leases in the database when other instances may share it (not on SQLite)."""
        if not storage.db.shared:
            return None
        cfg = self.config.storage
        name = self._instance_name()
        event(log, "session_leases_on", instance=name, lease_seconds=cfg.session_lease_seconds)
        return SessionLeases(storage.db, name, cfg.session_lease_seconds)

    async def stop(self, deadline: float = 10.0) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._ready = False
        for task in self._background:
            task.cancel()
        if self.reloader is not None:
            await self.reloader.close()
        if self.router is not None:
            await self.router.drain(deadline)
        if self.traces is not None:
            await self.traces.settle()
        if self.jobs is not None:
            await self.jobs.stop()
        if self.session_memory is not None:
            await self.session_memory.stop()
        if self.recall is not None:
            await self.recall.stop()
        for adapter in self.adapters.values():
            try:
                await adapter.stop()
            except Exception as exc:
                event(log, "adapter_stop_failed", logging.WARNING, error=type(exc).__name__)
        if self._runner is not None:
            await self._runner.cleanup()
        await self.llm.aclose()
        if self.storage is not None:
            await self.storage.close()
        event(log, "gateway_stopped")

    async def run_until_signal(self) -> None:
        """Run until SIGINT or SIGTERM, then let turns in flight finish for up to
        `shutdown.timeout_seconds`. With a config file, SIGHUP reloads config.yaml and SIGUSR1
        reloads it even when it takes every user, token or the model away: `clawgate reload
        [--force]` sends them to the process named by `<data_dir>/clawgate.pid`, written here."""
        loop = asyncio.get_running_loop()
        handlers = {signal.SIGINT: self._stopping.set, signal.SIGTERM: self._stopping.set}
        if hasattr(signal, "SIGHUP"):
            handlers[signal.SIGHUP] = self._reload_signal
            handlers[signal.SIGUSR1] = self._forced_reload_signal
        for sig, handler in handlers.items():
            loop.add_signal_handler(sig, handler)
        pid_file: Path | None = None
        try:
            await self.start()
            pid_file = try_write_pid_file(self.config.storage.data_dir)  # for `clawgate reload`
            if self._sites:
                print("\n".join(startup_lines(self.config, self.url, self.once)), file=sys.stderr, flush=True)
            await self._stopping.wait()
            remove_pid_file(pid_file)  # a reload asked for from now on would go unanswered
            pid_file = None
            deadline = self.config.shutdown.timeout_seconds
            event(log, "gateway_stopping", deadline_seconds=deadline)
            await self.stop(deadline)
        finally:
            remove_pid_file(pid_file)
            for sig in handlers:
                loop.remove_signal_handler(sig)

    def _reload_signal(self, force: bool = False) -> None:
        if self.reloader is None or not self._ready:
            event(log, "config_reload_skipped", reason="no config file" if self.reloader is None else "not running")
            return
        self.reloader.trigger("sigusr1" if force else "sighup", force=force)

    def _forced_reload_signal(self) -> None:
        self._reload_signal(force=True)

    async def _index_daily_files(self) -> None:
        """Daily files edited by hand (or written before a crash) are found again: index what changed."""
        assert self.daily_index is not None
        try:
            chunks = await self.daily_index.scan()
        except Exception as exc:
            event(log, "daily_index_failed", logging.WARNING, error=type(exc).__name__)
            return
        if chunks:
            event(log, "daily_files_indexed", chunks=chunks)

    async def _maintenance(self, every: float = 3600.0) -> None:
        """Hourly: expired evidence and traces go, and forgotten memories past their undo window."""
        assert self.storage is not None
        while True:
            try:
                gone = await self.storage.records.expire()
                if gone:
                    event(log, "memory_expired", records=gone)
                if self.recall is not None:
                    await self.recall.vectors.prune()  # vectors of forgotten or expired items
                pruned_jobs = await self.storage.jobs.prune()  # done a week ago, dead for a month
                if pruned_jobs:
                    event(log, "jobs_pruned", jobs=pruned_jobs)
                if self.traces is not None:
                    pruned = await self.traces.store.prune()  # recall traces past their retention
                    if pruned:
                        event(log, "recall_traces_pruned", traces=pruned)
            except Exception as exc:  # a busy or failing database: try again next hour
                event(log, "memory_expire_failed", logging.WARNING, error=type(exc).__name__)
            await asyncio.sleep(every)

    async def _check_models(self) -> None:
        """Warn operators early about a model that cannot work (no credentials), instead of at the first chat."""
        started = time.perf_counter()
        await self.llm.ready()
        event(log, "llm_loaded", ms=(time.perf_counter() - started) * 1000)
        for agent in self.config.agents.list:
            chain = model_chain(self.config, agent)
            if not chain:
                event(log, "llm_not_configured", logging.WARNING, agent=agent.name, hint="set ai.model in config.yaml")
            for model, keys in (await self.llm.missing_credentials(chain)).items():
                event(
                    log,
                    "llm_credentials_missing",
                    logging.WARNING,
                    agent=agent.name,
                    model=model,
                    missing=",".join(keys),
                    hint="set ai.api_key in config.yaml or the variable",
                )

    # -- info -------------------------------------------------------------------------------------

    @staticmethod
    def url_for(site: web.TCPSite) -> str:
        server = site._server  # aiohttp exposes bound sockets only here
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            host, port = sockets[0].getsockname()[:2]
            host = f"[{host}]" if ":" in host else host
            return f"http://{host}:{port}"
        return site.name

    @property
    def url(self) -> str:
        return self.url_for(self._sites[0])

    async def status(self) -> dict[str, Any]:
        """Channels, models, embeddings, the job queue and the last consolidation, as the status page
        shows them. Model reachability is what the latest call to each model found (no call is made)."""
        storage = self.storage
        assert storage is not None
        channels = {}
        for name, adapter in self.adapters.items():
            health = adapter.health()
            channels[name] = {"ok": health.ok, "detail": health.detail}
        models = []
        seen: set[str] = set()
        for agent in self.config.agents.list:
            chain = model_chain(self.config, agent)
            missing = await self.llm.missing_credentials(chain) if self.llm.loaded else {}
            for spec in chain:
                if spec.model in seen:
                    continue
                seen.add(spec.model)
                last = self.metrics.last_llm_call.get(spec.model)
                models.append(
                    {
                        "model": spec.model,
                        "agent": agent.name,
                        "last_outcome": last[0] if last else None,
                        "last_call_at": _iso(last[1]) if last else None,
                        "missing_credentials": missing.get(spec.model, []),
                    }
                )
        embeddings: dict[str, Any] = {"enabled": False}
        recall = self.recall
        if recall is not None and recall.embedder is not None:
            model_id = recall.embedder.model_id
            coverage = await recall.vectors.coverage(model_id)
            embeddings = {
                "enabled": True,
                "model": model_id,
                "loaded": recall.index is not None,
                "coverage": {kind: {"embedded": done, "total": total} for kind, (done, total) in coverage.items()},
            }
        consolidated = await storage.jobs.list(DONE, CONSOLIDATE_JOB, 1)
        return {
            "uptime_seconds": round(time.time() - self.started_at),
            "channels": channels,
            "models": models,
            "embeddings": embeddings,
            "jobs": await storage.jobs.counts(),
            "flushes": await storage.flushes.counts(),
            "last_consolidation": consolidated[0].finished_at.isoformat()
            if consolidated and consolidated[0].finished_at
            else None,
            # config.yaml as running: the last reload, its problems' paths, what waits for a restart
            "config": self.reloader.status() if self.reloader is not None else None,
        }

    async def _readiness(self) -> tuple[bool, dict[str, Any]]:
        storage_ok = self.storage is not None and await self.storage.ping()
        unwritable = await self.write_check.problem() if storage_ok and self.write_check is not None else None
        chans = {name: a.health().ok for name, a in self.adapters.items()}
        ok = self._ready and storage_ok and unwritable is None and all(chans.values())
        detail: dict[str, Any] = {"storage": storage_ok, "writable": storage_ok and unwritable is None}
        if unwritable is not None:
            detail["problem"] = unwritable
        return ok, {**detail, "channels": chans, "model_loaded": self.llm.loaded}

    async def _watch_storage(self, every: float = 2.0) -> None:
        """While the storage cannot be written (a write failed, or readiness found it so), look
        again every `every` seconds; once it can, answer what was put off meanwhile."""
        assert self.router is not None and self.write_check is not None and self.storage is not None
        db = self.storage.db
        seen = db.unwritable_failures
        while True:
            await asyncio.sleep(every)
            # A write that failed since the last look counts even when the flag was cleared meanwhile
            # by a transaction that wrote nothing: what it put off still waits to be answered.
            if self.write_check.last is None and db.unwritable_failures == seen:
                continue
            seen = db.unwritable_failures
            event(
                log,
                "storage_unwritable",
                logging.ERROR,
                problem=self.write_check.last or db.unwritable or "a write failed",
            )
            while (problem := await self.write_check.problem()) is not None:
                log.debug("storage still unwritable: %s", problem)
                await asyncio.sleep(every)
            resumed = await self.router.resume_unfinished()
            event(log, "storage_writable_again", resumed=resumed)

    async def _history(self, ref: ConversationRef, identity: str) -> list[HistoryItem]:
        assert self.storage is not None and self.router is not None
        user = await self.storage.identities.resolve(identity)
        key = self.router.session_key_for(ref, user)
        msgs = await self.storage.sessions.history(key)
        notices = (NOTICE_AUTHOR, COMMAND_ANSWER_AUTHOR)
        return [HistoryItem("notice" if m.author in notices else m.role, m.content) for m in msgs]

    async def _threads(self, ref: ConversationRef, identity: str) -> list[ConversationSummary]:
        """The open conversations of the chat `ref` is in (its own and its threads), for the chat page."""
        assert self.storage is not None and self.router is not None
        user = await self.storage.identities.resolve(identity)
        base = self.router.session_key_for(replace(ref, thread_id=None), user)
        found = await self.storage.sessions.threads(base)
        return [ConversationSummary(t.key[len(base) + 1 :] or None, t.title, t.updated_at.isoformat()) for t in found]

    def _stop_turn(self, event_id: str) -> None:
        if self.router is not None:
            self.router.stops.request(event_id)


def _iso(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).isoformat()
