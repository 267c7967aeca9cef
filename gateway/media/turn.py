"""A message's attachments made ready for its turn (docs/media.md): refused early when the platform's
description already shows they cannot be read, else downloaded through the channel, told apart by
their bytes, and read (a picture prepared, a file's text extracted, a voice note transcribed).

A channel that carries attachments offers (gateway/media/source.py):
- `locate_media(attachment)`: the bytes (a web upload) or where to download them, a URL and the
  headers carrying the bot's credentials (a Telegram getFile path, a Slack private URL, a Discord
  CDN URL);
- `media_origins`: the origins it may download from, its own hosts and its configured API base;
- optionally `media_limit`: the most bytes the platform lets a bot download (Telegram's 20 MB).

Nothing is kept of the bytes: the result says what the session stores (a line per attachment) and
what the model reads this turn. After a crash the journaled event still names the platform's file,
and the turn downloads it again.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import aiohttp

from gateway.config.model import AgentConfig, AIConfig, Config
from gateway.core.channel_config import MediaConfig
from gateway.core.events import Attachment, MessageReceived
from gateway.core.logs import event
from gateway.llm.client import LLMClient, classify
from gateway.media import audio, fetch, frame, images, pdf, policy, text
from gateway.media.kinds import KINDS_READ, Identified, Kind, clock, declared_kind, human_size, identify
from gateway.media.policy import Problem
from gateway.media.source import MediaSource
from gateway.turn.engine import model_chain
from memory.embed.providers import resolve_credentials

log = logging.getLogger("clawgate.media")

PDF_AT_ONCE = 2  # PDF readers running at once (each a process of its own)


@dataclass(slots=True)
class _Message:
    """One message's attachments being read: where they come from and the limits they meet."""

    ev: MessageReceived
    source: MediaSource
    session: aiohttp.ClientSession
    cfg: MediaConfig
    legacy: int | None  # max_attachment_bytes
    platform: int | None  # the most the platform lets a bot download
    config: Config
    agent: AgentConfig
    chars: int  # of file text, left for this message's other files

    def cap(self, kind: Kind | None) -> int:
        return policy.cap(self.cfg, kind, self.legacy, self.platform)

    def log(self, name: str, level: int = logging.INFO, **ctx: Any) -> None:
        event(log, name, level, channel=self.ev.ref.channel, event_id=self.ev.event_id, **ctx)


class MediaTurns:
    def __init__(self, llm: LLMClient) -> None:
        self.llm = llm
        self._pdf_slots = asyncio.Semaphore(PDF_AT_ONCE)
        self._vision: dict[str, bool] = {}

    async def resolve(self, ev: MessageReceived, source: object, config: Config, agent: AgentConfig) -> frame.TurnMedia:
        """`ev`'s text and attachments as its turn uses them, or the reply that refuses them."""
        if not ev.attachments:
            return frame.TurnMedia.plain_text(ev.text)
        started = time.perf_counter()
        channel = config.channels.get(ev.ref.channel)
        cfg = getattr(channel, "media", None) or MediaConfig()
        legacy = getattr(channel, "max_attachment_bytes", None)
        if not cfg.enabled:
            return self._refused(ev, policy.disabled(), ["media disabled"])
        if not isinstance(source, MediaSource):
            return self._refused(ev, policy.no_source(), ["channel has no media source"])
        platform = getattr(source, "media_limit", None)
        hears = config.ai.transcription.model is not None
        early = [
            p
            for att in ev.attachments
            if (p := policy.before_download(att, cfg, legacy=legacy, platform=platform, transcription=hears))
        ]
        if early:
            return self._refused(ev, policy.refusal(early), [p.why for p in early])
        parts: list[frame.Part] = []
        problems: list[Problem] = []
        timeout = aiohttp.ClientTimeout(total=cfg.download_seconds)
        # A voice note takes a few seconds to fetch and transcribe: the person sees the bot typing.
        typing = getattr(source, "typing", None)
        async with (
            typing(ev.ref) if callable(typing) else nullcontext(),
            aiohttp.ClientSession(timeout=timeout) as session,
        ):
            msg = _Message(ev, source, session, cfg, legacy, platform, config, agent, cfg.max_file_chars)
            for att in ev.attachments:
                try:
                    parts.append(await self._one(msg, att))
                except _Refused as refused:
                    problems.append(refused.problem)
                except Exception as exc:  # a reader failing in a way not foreseen: a reply, not a crash
                    msg.log("media_failed", logging.ERROR, error=type(exc).__name__)
                    log.debug("media_failed traceback", exc_info=True)
                    problems.append(Problem(policy.display_name(att), "I couldn't read it (an error on my side)"))
        if problems:
            return self._refused(ev, policy.refusal(problems), [p.why for p in problems])
        event(
            log,
            "media_ready",
            channel=ev.ref.channel,
            event_id=ev.event_id,
            count=len(parts),
            ms=(time.perf_counter() - started) * 1000,
        )
        return frame.compose(ev.text, parts)

    def _refused(self, ev: MessageReceived, reply: str, reasons: list[str]) -> frame.TurnMedia:
        event(log, "media_refused", channel=ev.ref.channel, event_id=ev.event_id, reasons="; ".join(reasons))
        return frame.TurnMedia.refused(ev.text, reply)

    async def _one(self, msg: _Message, att: Attachment) -> frame.Part:
        name = policy.display_name(att)
        data = await self._download(msg, att, name)
        if not data:
            raise _Refused(Problem(name, "it is empty"))
        found = identify(att, data)
        if found.kind not in KINDS_READ:
            what = "videos" if found.kind == "video" else f"this kind of file ({found.label})"
            raise _Refused(policy.unsupported(name, what))
        kind_limit = msg.cap(found.kind)
        if len(data) > kind_limit:
            raise _Refused(policy.too_big(name, found.kind, len(data), kind_limit))
        ref = frame.MediaRef(found.kind, name, len(data), hashlib.sha256(data).hexdigest())
        msg.log("media_received", kind=found.kind, mime=found.mime, bytes=len(data), sha256=ref.sha256[:16])
        if found.kind == "image":
            return await self._image(msg, ref, data)
        if found.kind == "audio":
            return await self._audio(msg, att, ref, found, data)
        return await self._document(msg, ref, found, data)

    async def _download(self, msg: _Message, att: Attachment, name: str) -> bytes:
        limit = msg.cap(declared_kind(att))
        try:
            located = await msg.source.locate_media(att)
            if isinstance(located, bytes):
                if len(located) > limit:
                    raise fetch.TooLarge(limit)
                return located
            url, headers = located
            got = await fetch.download(
                msg.session,
                url,
                headers,
                allowed_origins=msg.source.media_origins,
                cap=limit,
                timeout=msg.cfg.download_seconds,
            )
        except fetch.TooLarge as exc:
            raise _Refused(policy.over(name, declared_kind(att), exc.cap)) from None
        except fetch.FetchRefused as exc:
            msg.log("media_host_refused", logging.WARNING, host=exc.host)
            why = "its address is not one of the platform's own, so I did not fetch it"
            raise _Refused(Problem(name, why)) from None
        except fetch.FetchFailed as exc:
            msg.log("media_download_failed", logging.WARNING, reason=exc.reason)
            raise _Refused(Problem(name, f"I couldn't download it: {exc.reason}")) from None
        except FileNotFoundError:
            raise _Refused(Problem(name, "it is no longer available; please send it again")) from None
        except Exception as exc:  # the platform's API refused or failed: a channel raises its SDK's errors
            msg.log("media_locate_failed", logging.WARNING, error=type(exc).__name__)
            raise _Refused(Problem(name, "the platform did not hand it over; please try again")) from None
        if got.content_type == "text/html" and "html" not in (att.mime or att.kind or ""):
            # Slack and others answer a download they do not authorize with their sign-in page.
            raise _Refused(Problem(name, "the platform sent a web page instead of the file (a missing permission?)"))
        return got.data

    async def _image(self, msg: _Message, ref: frame.MediaRef, data: bytes) -> frame.Part:
        sees = await self._sees(msg.config, msg.agent)
        try:
            if sees:
                prepared = await asyncio.to_thread(images.prepare, data, msg.cfg.max_image_side)
                width, height = prepared.original
            else:
                width, height = await asyncio.to_thread(images.check, data)
        except images.BadImage as exc:
            raise _Refused(Problem(ref.name, exc.reason)) from None
        detail = f"{width}x{height} pixels, {human_size(ref.size)}"
        return frame.image(ref, prepared.data_url() if sees else None, detail)

    async def _document(self, msg: _Message, ref: frame.MediaRef, found: Identified, data: bytes) -> frame.Part:
        size = human_size(ref.size)
        if msg.chars <= 0:
            return frame.document(ref, found.label, size, "", ["not read: earlier files used up the text budget"])
        if found.mime == "application/pdf":
            cfg = msg.cfg
            async with self._pdf_slots:
                try:
                    read = await pdf.read(
                        data, max_pages=cfg.max_pdf_pages, max_chars=msg.chars, seconds=cfg.pdf_seconds
                    )
                except pdf.BadPdf as exc:
                    raise _Refused(Problem(ref.name, f"I couldn't read this PDF: {exc.reason}")) from None
            msg.chars -= len(read.text)
            pages = f"{read.pages} page{'s' if read.pages != 1 else ''}"
            return frame.document(ref, "PDF", f"{size}, {pages}", read.text, _pdf_notes(read))
        decoded = text.decode(data, msg.chars)
        msg.chars -= len(decoded.text)
        notes = [f"cut at {len(decoded.text):,} characters"] if decoded.cut else []
        return frame.document(ref, found.label, size, decoded.text, notes)

    async def _audio(
        self, msg: _Message, att: Attachment, ref: frame.MediaRef, found: Identified, data: bytes
    ) -> frame.Part:
        cfg, ai = msg.cfg, msg.config.ai
        seconds = att.duration if att.duration is not None else audio.duration(data, found.mime)
        if seconds is not None and seconds > cfg.max_audio_seconds:
            raise _Refused(policy.too_long(ref.name, seconds, cfg.max_audio_seconds))
        spec = ai.transcription
        if spec.model is None:
            raise _Refused(Problem(ref.name, "voice is not turned on", needs_transcription=True))
        base, key = transcription_credentials(ai)
        started = time.perf_counter()
        try:
            words = await audio.transcribe(
                await self.llm.ready(),
                data,
                found.mime,
                att.name,
                model=spec.model,
                api_base=base,
                api_key=key,
                language=spec.language,
                timeout=spec.timeout_seconds,
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            kind, status = classify(exc)
            msg.log("media_transcription_failed", logging.WARNING, model=spec.model, kind=kind, status=status)
            why = f"I couldn't transcribe it (the transcription model failed: {kind})"
            raise _Refused(Problem(ref.name, why)) from None
        msg.log("media_transcribed", model=spec.model, seconds=seconds, ms=(time.perf_counter() - started) * 1000)
        length = clock(seconds) if seconds is not None else human_size(ref.size)
        what = "voice message" if found.label == "voice message" else f"audio {ref.name}"
        return frame.transcript(ref, what, length, words)

    async def _sees(self, config: Config, agent: AgentConfig) -> bool:
        """Whether the turn's models can see pictures: ai.vision, or LiteLLM's word for every model
        of the chain (a fallback that cannot see would fail on an image part)."""
        if config.ai.vision != "auto":
            return config.ai.vision == "on"
        models = [spec.model for spec in model_chain(config, agent)]
        if not models:
            return False
        unknown = [m for m in models if m not in self._vision]
        if unknown:
            litellm = await self.llm.ready()
            for model in unknown:
                self._vision[model] = _supports_vision(litellm, model)
        return all(self._vision[m] for m in models)


class _Refused(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.why)
        self.problem = problem


def _supports_vision(litellm: Any, model: str) -> bool:
    try:
        return bool(litellm.supports_vision(model=model))
    except Exception:  # a model LiteLLM does not know: it cannot be said to see
        return False


def _pdf_notes(read: pdf.PdfText) -> list[str]:
    if read.stopped == "pages":
        return [f"only its first {read.read} of {read.pages} pages were read"]
    if read.stopped == "chars":
        return [f"cut within page {read.read}: the text budget was reached"]
    if read.stopped == "time":
        return [f"only its first {read.read} pages were read before the time allowed ran out"]
    return []


def transcription_credentials(ai: AIConfig) -> tuple[str | None, str | None]:
    """Where transcription requests go and with which key: ai.transcription's own, else ai's when the
    chat model is of the same provider (a key is not sent to another provider's address), by the
    rule remote embeddings follow (memory.embed.providers.resolve_credentials)."""
    spec = ai.transcription
    if spec.model is None:
        return None, None
    found = resolve_credentials(
        spec.model if "/" in spec.model else f"openai/{spec.model}",  # a bare id is OpenAI's, as LiteLLM reads it
        api_base=spec.api_base,
        api_key=spec.api_key.get_secret_value() if spec.api_key else None,
        ai_model=ai.model,
        ai_api_base=ai.api_base,
        ai_api_key=ai.api_key.get_secret_value() if ai.api_key else None,
    )
    return found.api_base, found.api_key
