"""A picture made fit for a prompt (docs/media.md): decoded with Pillow (a file that does not decode
is refused), turned upright, scaled down to `max_side` on its longest side, and encoded again as
JPEG (PNG when it has transparency). Encoding again also drops what the file carried besides its
pixels (EXIF, with a phone's GPS position): the provider gets the picture, nothing else.

CPU work: the caller runs it off the event loop (asyncio.to_thread; Pillow releases the GIL while it
decodes and resizes).
"""

from __future__ import annotations

import base64
import io
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from PIL import Image, ImageOps

# A picture with more pixels than this is refused before it is decoded: a few kilobytes of PNG can
# declare a canvas that needs gigabytes (a decompression bomb). 50 megapixels covers any camera.
MAX_PIXELS = 50_000_000
JPEG_QUALITY = 85
_FORMATS = frozenset({"PNG", "JPEG", "GIF", "WEBP", "BMP", "TIFF", "MPO"})
T = TypeVar("T")


class BadImage(Exception):
    """The file is not a picture this can read: `reason` in plain words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class PreparedImage:
    mime: str
    data: bytes
    width: int
    height: int
    original: tuple[int, int]  # the picture's size as sent

    def data_url(self) -> str:
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}"

    @property
    def scaled(self) -> bool:
        return (self.width, self.height) != self.original


def prepare(data: bytes, max_side: int) -> PreparedImage:
    """`data` decoded, upright, within `max_side`, encoded again; BadImage when it does not decode."""
    return _decoded(data, lambda img, size: _encode(ImageOps.exif_transpose(img), size, max_side))


def check(data: bytes) -> tuple[int, int]:
    """The size of the picture `data`, once it decoded whole (for a model that will not see it: a
    damaged file is refused all the same); BadImage when it does not decode."""
    return _decoded(data, lambda _img, size: size)


def _decoded(data: bytes, then: Callable[[Image.Image, tuple[int, int]], T]) -> T:
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            with Image.open(io.BytesIO(data)) as img:
                if img.format not in _FORMATS:
                    raise BadImage(f"{img.format or 'this'} pictures are not supported")
                width, height = img.size
                if width * height > MAX_PIXELS:
                    megapixels = MAX_PIXELS // 1_000_000
                    raise BadImage(f"the picture is {width}x{height} pixels; at most {megapixels} megapixels are read")
                img.seek(0)  # an animation: its first frame
                img.load()
                return then(img, (width, height))
        except BadImage:
            raise
        except (Image.DecompressionBombWarning, Image.DecompressionBombError):
            raise BadImage(f"the picture has more than {MAX_PIXELS // 1_000_000} megapixels") from None
        except (OSError, SyntaxError, ValueError, EOFError, Image.UnidentifiedImageError) as exc:
            # Pillow reports a truncated or corrupt file as one of these, whatever the format.
            raise BadImage("the picture is damaged or not a picture") from exc


def _encode(img: Image.Image, original: tuple[int, int], max_side: int) -> PreparedImage:
    transparent = img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info)
    img = img.convert("RGBA" if transparent else "RGB")
    if max(img.size) > max_side:
        img.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    if transparent:
        img.save(out, "PNG", optimize=False)
        mime = "image/png"
    else:
        img.save(out, "JPEG", quality=JPEG_QUALITY)
        mime = "image/jpeg"
    return PreparedImage(mime, out.getvalue(), img.width, img.height, original)
