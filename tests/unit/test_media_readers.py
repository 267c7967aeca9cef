"""Reading what people send (gateway/media): pictures with Pillow, PDFs with pypdf in a child process,
text by its bytes, the length of audio, and the download that only goes to the platform's hosts and
stops at its cap (against local servers)."""

from __future__ import annotations

import io
import time
import wave
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from PIL import Image

from gateway.media import audio, fetch, images, pdf, text
from tests.fakes import media
from tests.fakes.serve import serve_loopback

# -- pictures ------------------------------------------------------------------------------------------


def test_a_large_picture_is_scaled_and_its_metadata_dropped() -> None:
    source = io.BytesIO()
    exif = Image.Exif()
    exif[0x010F] = "PhoneMaker"  # Make; a GPS block would be dropped the same way
    Image.new("RGB", (4000, 3000), (10, 200, 10)).save(source, "JPEG", exif=exif)
    prepared = images.prepare(source.getvalue(), 2048)
    assert (prepared.width, prepared.height, prepared.original) == (2048, 1536, (4000, 3000))
    out = Image.open(io.BytesIO(prepared.data))
    assert out.format == "JPEG" and not out.getexif()
    assert prepared.data_url().startswith("data:image/jpeg;base64,/9j/")


def test_transparency_stays_png_and_a_small_picture_keeps_its_size() -> None:
    source = io.BytesIO()
    Image.new("RGBA", (40, 30), (0, 0, 0, 0)).save(source, "PNG")
    prepared = images.prepare(source.getvalue(), 2048)
    assert (prepared.mime, prepared.width, prepared.height, prepared.scaled) == ("image/png", 40, 30, False)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (media.corrupt_jpeg(), "damaged"),
        (media.pixel_bomb(), "megapixels"),
        (b"GIF89a" + bytes(20), "damaged"),
        (b"not a picture at all", "damaged"),
    ],
)
def test_what_is_not_a_readable_picture(data: bytes, says: str) -> None:
    with pytest.raises(images.BadImage, match=says):
        images.prepare(data, 2048)


# -- PDFs ----------------------------------------------------------------------------------------------


async def test_a_pdf_is_read_page_by_page_within_its_limits() -> None:
    read = await pdf.read(media.pdf(["alpha", "beta", "gamma"]), max_pages=2, max_chars=10_000, seconds=10)
    assert (read.pages, read.read, read.stopped) == (3, 2, "pages")
    assert read.text == "[page 1]\nalpha\n\n[page 2]\nbeta"
    cut = await pdf.read(media.pdf(["x" * 80] * 5), max_pages=50, max_chars=150, seconds=10)
    assert cut.stopped == "chars" and len(cut.text) <= 150


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (media.pdf_inflating(), "unpacks to far more than its size"),
        (b"%PDF-1.4\n" + bytes(range(256)) * 8, "damaged or not a PDF"),
        (b"", "damaged or not a PDF"),
    ],
)
async def test_hostile_or_broken_pdfs_are_refused_quickly(data: bytes, says: str) -> None:
    started = time.monotonic()
    with pytest.raises(pdf.BadPdf, match=says):
        await pdf.read(data, max_pages=50, max_chars=20_000, seconds=10)
    assert time.monotonic() - started < 8


async def test_a_pdf_reader_out_of_time_is_stopped() -> None:
    many = media.pdf_many_pages(3000)
    started = time.monotonic()
    read = await pdf.read(many, max_pages=3000, max_chars=10_000_000, seconds=0.3)
    # It stops itself between pages; a child that could not would be killed 5 s after its time. (On a
    # busy machine the child may not have read a page yet when its time is up: that is a stop too.)
    assert read.stopped == "time" and read.read < 3000
    assert time.monotonic() - started < 6


# -- text and audio ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "budget", "out", "cut"),
    [
        (b"a\r\nb\n", 100, "a\nb\n", False),
        (b"\xef\xbb\xbfbom", 100, "bom", False),
        ("x\u00e9y".encode("utf-16"), 100, "x\u00e9y", False),
        ("K\u00f6ln".encode("cp1252"), 100, "K\u00f6ln", False),
        (b"0123456789" * 100, 25, "0123456789012345678901234", True),
        ("\u00e9".encode() * 10, 3, "\u00e9\u00e9\u00e9", True),
    ],
)
def test_text_is_decoded_up_to_its_budget(data: bytes, budget: int, out: str, cut: bool) -> None:
    assert text.decode(data, budget) == text.Text(out, cut)


def _wav(seconds: float, rate: int = 8000) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(1)
        w.setframerate(rate)
        w.writeframes(b"\x80" * int(seconds * rate))
    return out.getvalue()


@pytest.mark.parametrize(
    ("data", "mime", "seconds"),
    [
        (media.ogg_voice(14), "audio/ogg", 14.0),
        (media.ogg_voice(3 * 3600), "audio/ogg", 10_800.0),
        (_wav(2.5), "audio/wav", 2.5),
        (b"\xff\xfb\x90\x00" + bytes(15_996), "audio/mpeg", 1.0),  # 128 kbit/s: 16,000 bytes a second
        (b"OggS but nothing else", "audio/ogg", None),
        (b"\x00" * 10, "audio/mp4", None),
    ],
)
def test_how_long_audio_is(data: bytes, mime: str, seconds: float | None) -> None:
    assert audio.duration(data, mime) == seconds


def test_transcription_file_names_carry_the_format() -> None:
    assert audio.file_name(None, "audio/ogg") == "voice.ogg"
    assert audio.file_name("memo.m4a", "audio/mp4") == "memo.m4a"
    assert audio.file_name("memo", "audio/mpeg") == "memo.mp3"


# -- downloads -----------------------------------------------------------------------------------------


@pytest.fixture
async def hosts() -> AsyncIterator[tuple[str, str, list[tuple[str, str | None]]]]:
    """Two loopback servers (two origins): the platform's and another one; every request they get."""
    seen: list[tuple[str, str | None]] = []

    async def serve(request: web.Request) -> web.StreamResponse:
        seen.append((request.path, request.headers.get("Authorization")))
        if request.path == "/file":
            return web.Response(body=b"x" * 1000)
        if request.path == "/endless":  # no length declared, and more than any cap
            resp = web.StreamResponse()
            await resp.prepare(request)
            for _ in range(1000):
                await resp.write(b"y" * 65_536)
            return resp
        if request.path == "/declared":
            return web.Response(body=b"z" * 5000)
        if request.path.startswith("/to/"):
            raise web.HTTPFound(request.query["where"])
        return web.Response(status=404)

    apps = []
    for _ in range(2):
        app = web.Application()
        app.router.add_get("/{tail:.*}", serve)
        apps.append(await serve_loopback(app))
    try:
        yield apps[0][1], apps[1][1], seen
    finally:
        for runner, _ in apps:
            await runner.cleanup()


async def test_a_download_goes_to_the_platforms_origin_with_its_credentials(
    hosts: tuple[str, str, list[tuple[str, str | None]]],
) -> None:
    platform, other, seen = hosts
    async with aiohttp.ClientSession() as session:
        got = await fetch.download(
            session, f"{platform}/file", {"Authorization": "Bearer t"}, allowed_origins=[platform], cap=2000, timeout=5
        )
        assert got.data == b"x" * 1000 and seen == [("/file", "Bearer t")]
        with pytest.raises(fetch.FetchRefused):
            await fetch.download(session, f"{other}/file", {}, allowed_origins=[platform], cap=2000, timeout=5)
        with pytest.raises(fetch.FetchRefused):  # a redirect off the platform is refused before it is followed
            await fetch.download(
                session, f"{platform}/to/?where={other}/file", {}, allowed_origins=[platform], cap=2000, timeout=5
            )
        assert [path for path, _ in seen] == ["/file", "/to/"]
        seen.clear()
        # A redirect to another allowed origin is followed, without the credentials of the first.
        await fetch.download(
            session,
            f"{platform}/to/?where={other}/file",
            {"Authorization": "Bearer t"},
            allowed_origins=[platform, other],
            cap=2000,
            timeout=5,
        )
        assert seen == [("/to/", "Bearer t"), ("/file", None)]


async def test_a_download_stops_at_its_cap(hosts: tuple[str, str, list[tuple[str, str | None]]]) -> None:
    platform, _, _ = hosts
    async with aiohttp.ClientSession() as session:
        with pytest.raises(fetch.TooLarge):
            await fetch.download(session, f"{platform}/declared", {}, allowed_origins=[platform], cap=4000, timeout=5)
        started = time.monotonic()
        with pytest.raises(fetch.TooLarge):  # 65 MB offered; reading stops past 100 KB
            await fetch.download(session, f"{platform}/endless", {}, allowed_origins=[platform], cap=100_000, timeout=5)
        assert time.monotonic() - started < 3
        with pytest.raises(fetch.FetchFailed, match="HTTP 404"):
            await fetch.download(session, f"{platform}/gone", {}, allowed_origins=[platform], cap=100, timeout=5)


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://cdn.discordapp.com/attachments/1/2/a.png?ex=1", "https://cdn.discordapp.com:443"),
        ("HTTPS://Files.Slack.com:443/x", "https://files.slack.com:443"),
        ("http://127.0.0.1:8081/file/bot1:x/a", "http://127.0.0.1:8081"),
        ("file:///etc/passwd", None),
        ("ftp://example.com/x", None),
        ("https://", None),
        ("http://[::1", None),
    ],
)
def test_origins(url: str, origin: str | None) -> None:
    assert fetch.origin_of(url) == origin


def test_a_host_that_merely_contains_the_platforms_is_not_it() -> None:
    allowed = ["https://files.slack.com"]
    assert fetch.allowed("https://files.slack.com/x", allowed)
    assert not fetch.allowed("https://files.slack.com.evil.example/x", allowed)
    assert not fetch.allowed("https://evil.example/files.slack.com", allowed)
    assert not fetch.allowed("http://files.slack.com/x", allowed)  # another scheme, another origin
    assert not fetch.allowed("https://files.slack.com@evil.example/x", allowed)


def test_a_picture_for_a_model_that_cannot_see_is_only_checked() -> None:
    assert images.check(media.png(30, 20)) == (30, 20)
    with pytest.raises(images.BadImage, match="damaged"):
        images.check(media.corrupt_jpeg())
