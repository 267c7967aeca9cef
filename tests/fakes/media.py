"""Files for the media tests (docs/media.md), made here, never downloaded: pictures (Pillow), PDFs
(pypdf), hostile PDFs, Ogg voice notes whose length is whatever the test says, and a check that no
file's bytes reached the gateway's database."""

from __future__ import annotations

import base64
import io
import sqlite3
import zlib
from pathlib import Path

from PIL import Image
from pypdf import PdfWriter
from pypdf.generic import ArrayObject, DecodedStreamObject, DictionaryObject, NameObject, StreamObject

PY_SOURCE = b'def greet(name: str) -> str:\n    """Say hello."""\n    return f"hello {name}"\n'


def png(width: int = 64, height: int = 48, color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, "PNG")
    return out.getvalue()


def jpeg(width: int = 64, height: int = 48, color: tuple[int, int, int] = (30, 120, 200)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, "JPEG", quality=90)
    return out.getvalue()


def corrupt_jpeg() -> bytes:
    """A JPEG's start, then noise: it says it is a picture and is not one."""
    return jpeg()[:40] + bytes(range(256)) * 4


def pixel_bomb() -> bytes:
    """A small PNG declaring a canvas of 30,000 x 30,000 pixels (900 megapixels)."""
    out = io.BytesIO()
    Image.new("1", (30_000, 30_000)).save(out, "PNG")
    return out.getvalue()


def _font(writer: PdfWriter) -> DictionaryObject:
    font = DictionaryObject(
        {
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject("/Helvetica"),
        }
    )
    return DictionaryObject({NameObject("/Font"): DictionaryObject({NameObject("/F1"): writer._add_object(font)})})


def pdf(pages: list[str]) -> bytes:
    """A PDF with one line of text per page."""
    writer = PdfWriter()
    resources = _font(writer)
    for text in pages:
        page = writer.add_blank_page(612, 792)
        content = DecodedStreamObject()
        content.set_data(f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode("latin-1"))
        page[NameObject("/Resources")] = resources
        page[NameObject("/Contents")] = writer._add_object(content)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def pdf_many_pages(n: int = 3000) -> bytes:
    return pdf([f"page number {i + 1}" for i in range(n)])


def pdf_inflating(megabytes: int = 120) -> bytes:
    """A one-page PDF whose content stream is a few hundred kilobytes deflated and `megabytes`
    inflated: a decompression bomb."""
    squeeze = zlib.compressobj(9)
    chunk = b"(A) Tj " * (1024 * 1024 // 7)
    packed = b"".join(squeeze.compress(chunk) for _ in range(megabytes)) + squeeze.flush()
    writer = PdfWriter()
    page = writer.add_blank_page(612, 792)
    stream = StreamObject()
    stream._data = packed
    stream[NameObject("/Filter")] = ArrayObject([NameObject("/FlateDecode")])
    page[NameObject("/Resources")] = _font(writer)
    page[NameObject("/Contents")] = writer._add_object(stream)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def _ogg_page(granule: int, sequence: int, body: bytes, flags: int = 0) -> bytes:
    header = b"OggS" + bytes([0, flags]) + granule.to_bytes(8, "little") + b"\x01\x00\x00\x00"
    return header + sequence.to_bytes(4, "little") + b"\x00\x00\x00\x00" + bytes([1, len(body)]) + body


def ogg_voice(seconds: float, noise: int = 2000) -> bytes:
    """An Ogg Opus stream's shape: its head page, some audio pages, and a last granule position
    that makes it `seconds` long (48 kHz, no pre-skip)."""
    head = b"OpusHead" + bytes([1, 1]) + (0).to_bytes(2, "little") + (48_000).to_bytes(4, "little") + b"\x00\x00\x00"
    pages = [_ogg_page(0, 0, head, flags=2), _ogg_page(0, 1, b"OpusTags" + b"\x00" * 8)]
    pages += [_ogg_page(0, 2 + i, bytes((i * 7 + j) % 251 for j in range(200))) for i in range(noise // 200)]
    pages.append(_ogg_page(int(seconds * 48_000), 99, b"\x00" * 10, flags=4))
    return b"".join(pages)


def zip_file() -> bytes:
    return b"PK\x03\x04" + b"\x14\x00" + bytes(range(200))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def database_holds(db: Path, *samples: bytes) -> list[str]:
    """Where in the SQLite database at `db` any of `samples` appears (a run of 24 bytes from its
    middle, raw or in base64), or any data URL: its tables and columns. Empty: no file's bytes were
    stored."""
    needles: list[bytes] = [b";base64,"]  # an image part (its data URL), whatever the picture
    for sample in samples:
        middle = sample[len(sample) // 2 : len(sample) // 2 + 24]
        if len(middle) >= 16:
            needles += [middle, base64.b64encode(sample)[len(sample) // 2 : len(sample) // 2 + 24]]
    found: list[str] = []
    with sqlite3.connect(db) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            columns = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
            for column in columns:
                for (value,) in conn.execute(f'SELECT "{column}" FROM "{table}"'):
                    raw = value if isinstance(value, bytes) else str(value).encode("utf-8", "surrogatepass")
                    if any(n in raw for n in needles):
                        found.append(f"{table}.{column}")
    return sorted(set(found))
