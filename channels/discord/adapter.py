"""Discord channel: discord.py's gateway client for receiving, its REST client for replies.

Endpoints come from the config (see endpoints.py: they are process-global in discord.py).
discord.py reconnects by itself and RESUMEs the session after a dropped socket (reconnect=True);
every send/edit/typing request runs through `platform_call`, which bounds it by
`request_timeout` and turns discord.py's automatic 429/5xx retries into `DeliveryError`.

Slash commands: after READY, `start` registers the gateway's commands as global application
commands (one bulk overwrite; a failure is logged, never fatal). Each use is acknowledged at once
with an ephemeral note (Discord wants an answer within 3 s) and delivered as the message
"/name text"; the gateway's reply then goes out through `send` like any other.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any, TypeVar

import discord

from channels.discord import endpoints
from channels.discord.calls import platform_call, trace_config
from channels.discord.commands import ack_text, command_definitions
from channels.discord.config import DiscordChannelConfig
from channels.discord.errors import DiscordStartError
from channels.discord.media import locate, media_origins
from channels.discord.normalize import command_name, normalize, normalize_command
from channels.discord.payloads import channel_payload, interaction_payload, message_payload
from channels.discord.render import render, rendered_length
from gateway.core.events import Attachment, ConversationRef, MessageReceived, MessageRef, OutboundMessage
from gateway.core.handoff import hand_off
from gateway.core.logs import event
from gateway.core.ports import Capabilities, ChannelServices, DeliveryError, EventSink, Health, Rate

log = logging.getLogger("clawgate.channels.discord")
T = TypeVar("T")

MAX_LENGTH = 2000
# discord.py clamps max_ratelimit_timeout to >= 30 s; our request hook (calls.py) catches 429s first.
MAX_RATELIMIT_TIMEOUT = 30.0
# Discord drops an interaction not answered within 3 s: a later acknowledgement is useless.
ACK_DEADLINE = 3.0
# An interaction's token takes follow-ups for 15 minutes; a little less, to be sure.
INTERACTION_TTL = 14 * 60.0
MAX_INTERACTIONS = 512


class DiscordAdapter:
    # Discord shows "typing" for about 10 s after each POST /typing.
    typing_interval: float = 8.0

    def __init__(self, name: str, config: DiscordChannelConfig, services: ChannelServices) -> None:
        if config.shard_ids is not None and config.shard_count is None:
            raise ValueError(f"discord channel {name!r}: shard_ids needs shard_count")
        if config.shard_ids is not None and config.shard_count is not None:
            if not config.shard_ids or any(not 0 <= s < config.shard_count for s in config.shard_ids):
                raise ValueError(f"discord channel {name!r}: shard_ids must be within 0..shard_count-1")
        self.name = name
        self.config = config
        self.services = services
        self.capabilities = Capabilities(
            can_edit=True,
            typing=True,
            threads=True,
            max_length=MAX_LENGTH,
            length=rendered_length,
            pacing=pacing,
            rendered=render,
            final_edit_matters=False,  # an edit shows its content, final or not
        )
        # Groups: a personal command's answer is an ephemeral follow-up to its interaction.
        self.capabilities = replace(self.capabilities, private_commands=True)
        # Slash commands waiting for their answer, by event id: an ephemeral answer is a follow-up
        # through the interaction's token, which Discord honours for 15 minutes.
        self._interactions: OrderedDict[str, tuple[float, discord.Interaction]] = OrderedDict()
        self._commands, rejected = command_definitions(services.commands)
        if rejected:
            event(log, "discord_commands_invalid", logging.WARNING, channel=name, names=",".join(rejected))
        self._command_names = frozenset(c["name"] for c in self._commands)
        self._endpoints = endpoints.endpoints_for(config.api_base_url, config.gateway_url)
        # Attachments are downloaded by gateway/media from Discord's file hosts only (docs/media.md).
        self.media_origins = media_origins(config)
        endpoints.claim(name, self._endpoints)
        self._client: discord.Client | None = None
        self._runner: asyncio.Task[None] | None = None
        self._sink: EventSink | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._connected = asyncio.Event()
        self._readies = 0
        self._online = False
        self._failure: str | None = None  # why the gateway connection ended for good, if it did

    # -- adapter port ---------------------------------------------------------------------------

    async def start(self, sink: EventSink) -> None:
        if self._runner is not None:
            raise RuntimeError(f"discord channel {self.name!r} is already started")
        self._sink = sink
        endpoints.claim(self.name, self._endpoints)
        endpoints.use_api(self._endpoints)
        client = self._client = self._build_client()
        self._connected.clear()
        self._readies = 0
        self._failure = None
        self._runner = asyncio.create_task(self._run(client), name=f"discord:{self.name}")
        ready = asyncio.create_task(self._connected.wait())
        try:
            await asyncio.wait({self._runner, ready}, timeout=self._start_timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
        if self._connected.is_set():
            event(log, "discord_connected", channel=self.name, bot_id=self._bot_id, guilds=len(client.guilds))
            await self._register_commands(client)
            return
        cause = self._runner.exception() if self._runner.done() and not self._runner.cancelled() else None
        await self.stop()
        raise DiscordStartError(f"discord channel {self.name!r} failed to start: {_start_failure(cause)}") from cause

    async def stop(self) -> None:
        client, runner = self._client, self._runner
        self._online = False
        for task in list(self._tasks):
            task.cancel()
        if client is not None and not client.is_closed():
            try:
                async with asyncio.timeout(self._stop_timeout):
                    await client.close()
            except Exception as exc:  # a close that hangs or fails must not keep the process up
                event(log, "discord_close_failed", logging.WARNING, channel=self.name, error=type(exc).__name__)
                await client.http.close()
        if runner is not None and not runner.done():
            runner.cancel()
        pending = [t for t in (runner, *self._tasks) if t is not None]
        if pending:
            await asyncio.wait(pending, timeout=self._stop_timeout)
        if runner is not None and runner.done() and not runner.cancelled() and runner.exception() is not None:
            event(log, "discord_runner_ended", channel=self.name, error=type(runner.exception()).__name__)
        self._tasks.clear()
        self._client, self._runner = None, None
        endpoints.release(self.name)

    async def send(self, msg: OutboundMessage) -> MessageRef:
        if msg.private_to is not None:
            return await self._send_private(msg)
        client = self._live_client("send")
        conv = msg.conversation
        channel = client.get_partial_messageable(_snowflake(conv.thread_id or conv.chat_id, "send"))
        extra: dict[str, Any] = {}
        if msg.reply_to is not None:
            # fail_if_not_exists=False: a reply to a message deleted meanwhile is still a reply, not an error.
            extra["reference"] = discord.MessageReference(
                message_id=_snowflake(msg.reply_to.message_id, "send"), channel_id=channel.id, fail_if_not_exists=False
            )
        # Discord never rejects content for its formatting (only for length or emptiness), so there
        # is no plain-text second attempt here. The text goes out as given: splitting is the gateway's.
        text = render(msg.text)
        sent = await self._call("send", lambda: channel.send(content=text, **extra))
        return MessageRef(conv, str(sent.id))

    async def _send_private(self, msg: OutboundMessage) -> MessageRef:
        """An ephemeral follow-up to the slash command the message answers: only its user sees it."""
        found = self._interactions.get(msg.in_reply_to_event or "")
        if found is None or time.monotonic() - found[0] > INTERACTION_TTL:
            # Never posted for everyone instead: the answer is for one person only.
            raise DeliveryError("discord private answer: its slash command is gone or expired", retryable=False)
        interaction = found[1]
        text = render(msg.text)
        sent = await self._call("followup", lambda: interaction.followup.send(content=text, ephemeral=True, wait=True))
        return MessageRef(msg.conversation, str(sent.id))

    async def edit(self, ref: MessageRef, text: str, final: bool) -> None:
        client = self._live_client("edit")
        conv = ref.conversation
        channel = client.get_partial_messageable(_snowflake(conv.thread_id or conv.chat_id, "edit"))
        message = channel.get_partial_message(_snowflake(ref.message_id, "edit"))
        content = render(text)
        await self._call("edit", lambda: message.edit(content=content))

    async def react(self, ref: MessageRef, reaction: str) -> None:
        message = self._partial_message(ref, "react")
        await self._call("react", lambda: message.add_reaction(reaction))

    async def unreact(self, ref: MessageRef, reaction: str) -> None:
        message = self._partial_message(ref, "unreact")
        me = self._live_client("unreact").user
        if me is None:
            raise DeliveryError("discord unreact failed: not logged in", retryable=True)
        await self._call("unreact", lambda: message.remove_reaction(reaction, me))

    def _partial_message(self, ref: MessageRef, what: str) -> discord.PartialMessage:
        conv = ref.conversation
        channel = self._live_client(what).get_partial_messageable(_snowflake(conv.thread_id or conv.chat_id, what))
        return channel.get_partial_message(_snowflake(ref.message_id, what))

    @asynccontextmanager
    async def typing(self, conv: ConversationRef) -> AsyncIterator[None]:
        task = asyncio.create_task(self._keep_typing(conv), name=f"discord-typing:{self.name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            yield
        finally:
            task.cancel()
            await asyncio.wait([task])

    def health(self) -> Health:
        client = self._client
        if client is None or client.is_closed():
            return Health(False, f"gateway closed: {self._failure}" if self._failure else "stopped")
        if not self._online:
            return Health(False, "connecting" if not self._connected.is_set() else "reconnecting")
        return Health(True, f"connected latency_ms={client.latency * 1000:.0f}")

    async def locate_media(self, attachment: Attachment) -> tuple[str, dict[str, str]]:
        """Where an attachment of a message is: its CDN URL (gateway/media downloads it)."""
        return await locate(attachment)

    # -- client ----------------------------------------------------------------------------------

    @property
    def _start_timeout(self) -> float:
        # Login, gateway discovery, the websocket handshake and READY, each one request or so.
        return max(10.0, 3 * self.config.request_timeout)

    @property
    def _stop_timeout(self) -> float:
        return min(5.0, self.config.request_timeout)

    @property
    def _bot_id(self) -> str:
        user = self._client.user if self._client is not None else None
        return str(user.id) if user is not None else ""

    def _build_client(self) -> discord.Client:
        # This bot never joins voice: skip discord.py's warnings about voice libraries.
        discord.VoiceClient.warn_nacl = discord.VoiceClient.warn_dave = False
        options: dict[str, Any] = {
            "intents": discord.Intents(guilds=True, guild_messages=True, dm_messages=True, message_content=True),
            "member_cache_flags": discord.MemberCacheFlags.none(),
            "chunk_guilds_at_startup": False,
            "max_messages": None,  # edits come through on_raw_message_edit: no message cache needed
            "allowed_mentions": discord.AllowedMentions.none(),
            "http_trace": trace_config(),
            "max_ratelimit_timeout": MAX_RATELIMIT_TIMEOUT,
        }
        ids, count = self.config.shard_ids, self.config.shard_count
        client: discord.Client
        if ids is not None and len(ids) == 1:
            client = discord.Client(shard_id=ids[0], shard_count=count, **options)
        elif count is not None:
            if ids is not None:
                options["shard_ids"] = ids
            client = discord.AutoShardedClient(shard_count=count, **options)
        else:
            client = discord.Client(**options)
        # discord.py finds handlers as attributes named on_<event>.
        client.on_message = self._on_message  # type: ignore[attr-defined]
        client.on_raw_message_edit = self._on_raw_message_edit  # type: ignore[attr-defined]
        client.on_interaction = self._on_interaction  # type: ignore[attr-defined]
        client.on_socket_event_type = self._on_socket_event_type  # type: ignore[attr-defined]
        client.on_ready = self._on_ready  # type: ignore[attr-defined]
        client.on_connect = self._on_up  # type: ignore[attr-defined]
        client.on_resumed = self._on_resumed  # type: ignore[attr-defined]
        client.on_disconnect = self._on_disconnect  # type: ignore[attr-defined]
        return client

    async def _run(self, client: discord.Client) -> None:
        await client.login(self.config.token.get_secret_value())
        if self.config.gateway_url is not None:
            endpoints.use_gateway(self.config.gateway_url)
        else:
            _shards, url, _limits = await client.http.get_bot_gateway()
            endpoints.use_gateway(url)
        try:
            await client.connect(reconnect=True)
        except Exception as exc:
            # Only unrecoverable closes end here (bad token, disallowed intents, bad shard config).
            self._online = False
            self._failure = type(exc).__name__
            if self._connected.is_set():
                event(log, "discord_connection_lost", logging.ERROR, channel=self.name, error=type(exc).__name__)
            raise

    def _expected_readies(self) -> int:
        client = self._client
        if isinstance(client, discord.AutoShardedClient):
            return len(client.shard_ids) if client.shard_ids else client.shard_count or 1
        return 1

    def _check_connected(self) -> None:
        """Connected once READY came for every shard and every guild it listed has arrived.

        discord.py's own on_ready waits a further `guild_ready_timeout` (2 s) of silence; it still
        counts (on_ready) when a guild stays unavailable.
        """
        client = self._client
        if client is None or self._connected.is_set() or self._readies < self._expected_readies():
            return
        if all(not g.unavailable for g in client.guilds):
            self._connected.set()

    async def _on_socket_event_type(self, event_type: str) -> None:
        # discord.py parses the event before this handler's task runs, so the cache is current.
        if event_type == "READY":
            self._readies += 1
        if event_type in ("READY", "GUILD_CREATE"):
            self._check_connected()
        if self._connected.is_set() and self._client is not None:
            # One task per gateway event is not worth keeping once connected.
            self._client.__dict__.pop("on_socket_event_type", None)

    async def _on_ready(self) -> None:
        self._connected.set()

    async def _on_up(self) -> None:
        self._online = True

    async def _on_resumed(self) -> None:
        self._online = True
        event(log, "discord_resumed", channel=self.name)

    async def _on_disconnect(self) -> None:
        if self._online:
            event(log, "discord_disconnected", logging.WARNING, channel=self.name)
        self._online = False

    # -- inbound ---------------------------------------------------------------------------------

    async def _on_message(self, message: discord.Message) -> None:
        ev = normalize(
            message_payload(message),
            channel=self.name,
            bot_id=self._bot_id,
            place=channel_payload(message.channel),
            bot_role_ids=_bot_roles(message.guild),
        )
        self._hand_off(ev)

    async def _on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        ev = normalize(
            payload.data,
            channel=self.name,
            bot_id=self._bot_id,
            place=channel_payload(payload.message.channel),
            bot_role_ids=_bot_roles(payload.message.guild),
            edited=True,
        )
        self._hand_off(ev)

    async def _on_interaction(self, interaction: discord.Interaction) -> None:
        if interaction.type is not discord.InteractionType.application_command:
            return  # buttons, modals, autocomplete: this bot offers none
        payload = interaction_payload(interaction)
        name = command_name(payload)
        ev = normalize_command(payload, channel=self.name, known=self._command_names)
        if ev is not None:
            self._keep_interaction(ev.event_id, interaction)
        # Answer first, so the ephemeral note shows above the reply the turn will post.
        await self._ack(interaction, ack_text(name, name in self._command_names, ev is not None))
        if self._client is None or self._client.is_closed():
            return  # stopped while acknowledging: no new turns
        self._hand_off(ev)  # even when the ack failed: the person did type the command

    def _keep_interaction(self, event_id: str, interaction: discord.Interaction) -> None:
        self._interactions[event_id] = (time.monotonic(), interaction)
        while len(self._interactions) > MAX_INTERACTIONS:
            self._interactions.popitem(last=False)

    async def _ack(self, interaction: discord.Interaction, text: str) -> None:
        """Interaction response type 4 (CHANNEL_MESSAGE_WITH_SOURCE), flags 64 (ephemeral)."""
        try:
            await platform_call(
                "interaction ack",
                lambda: interaction.response.send_message(text, ephemeral=True),
                timeout=min(ACK_DEADLINE, self.config.request_timeout),
            )
        except DeliveryError as exc:
            event(
                log,
                "discord_interaction_ack_failed",
                logging.WARNING,
                channel=self.name,
                interaction_id=interaction.id,
                error=str(exc),
            )

    async def _register_commands(self, client: discord.Client) -> None:
        """Bulk-overwrite the global commands with the gateway's. No commands: leave the app's alone."""
        if not self._commands:
            return
        app_id = client.application_id
        if app_id is None:  # set by login and READY: missing only if Discord's answers were odd
            event(
                log, "discord_commands_register_failed", logging.WARNING, channel=self.name, error="no application id"
            )
            return
        try:
            await self._call(
                "command registration", lambda: client.http.bulk_upsert_global_commands(app_id, self._commands)
            )
        except DeliveryError as exc:
            event(log, "discord_commands_register_failed", logging.WARNING, channel=self.name, error=str(exc))
            return
        event(log, "discord_commands_registered", channel=self.name, commands=",".join(sorted(self._command_names)))

    def _hand_off(self, ev: MessageReceived | None) -> None:
        if ev is None or self._sink is None:
            return
        hand_off(self._sink, ev, platform="discord", channel=self.name, log=log, tasks=self._tasks)

    # -- outbound --------------------------------------------------------------------------------

    def _live_client(self, what: str) -> discord.Client:
        client = self._client
        if client is None or client.is_closed():
            raise DeliveryError(f"discord {what} failed: channel {self.name!r} is not running", retryable=True)
        return client

    async def _call(self, what: str, op: Callable[[], Awaitable[T]]) -> T:
        return await platform_call(what, op, timeout=self.config.request_timeout)

    async def _keep_typing(self, conv: ConversationRef) -> None:
        """POST /typing now and every `typing_interval` until cancelled; failures only cost the indicator."""
        try:
            client = self._live_client("typing")
            send = functools.partial(client.http.send_typing, _snowflake(conv.thread_id or conv.chat_id, "typing"))
        except DeliveryError as exc:
            event(log, "discord_typing_failed", logging.DEBUG, channel=self.name, error=str(exc))
            return
        while True:
            try:
                await self._call("typing", send)
            except DeliveryError as exc:
                event(log, "discord_typing_failed", logging.DEBUG, channel=self.name, error=str(exc))
                if not exc.retryable:
                    return  # e.g. no permission in this channel: trying again will not help
            await asyncio.sleep(self.typing_interval)


def pacing(conv: ConversationRef) -> tuple[Rate, ...]:
    """Discord counts a channel's message creates and edits in one bucket (about 5 per 5 s). Its
    live state (X-RateLimit-Remaining) stays inside discord.py's private buckets, so the budget is a
    fixed one under it: 2 at once, then one every 1.67 s (no 5 s holds more than 5), so a short reply's
    final edit follows its first piece without a wait."""
    return (Rate(f"channel:{conv.thread_id or conv.chat_id}", 0.6, burst=2),)


def _bot_roles(guild: discord.Guild | None) -> tuple[str, ...]:
    role = guild.self_role if guild is not None else None
    return (str(role.id),) if role is not None else ()


def _snowflake(value: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise DeliveryError(f"discord {what} failed: {value!r} is not a Discord id", retryable=False) from None


def _start_failure(cause: BaseException | None) -> str:
    if cause is None:
        return "timed out waiting for the gateway's READY"
    if isinstance(cause, discord.LoginFailure):
        return "the bot token was rejected (401)"
    if isinstance(cause, discord.PrivilegedIntentsRequired):
        return "the Message Content intent is not enabled for this bot in the Discord developer portal"
    if isinstance(cause, discord.GatewayNotFound):
        return "GET /gateway/bot failed: cannot find the gateway URL"
    return f"{type(cause).__name__}: {cause}"


def create(name: str, config: DiscordChannelConfig, services: ChannelServices) -> DiscordAdapter:
    return DiscordAdapter(name, config, services)
