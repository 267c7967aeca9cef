"""Secret redaction for text that is about to be stored (DESIGN §6 and §11: memory people can trust).

Every chat message goes through `redact` before it reaches history, the archive, the full-text index
or a memory file, because stored text outlives the chat and is later searched and shown to a model.
Secret-like substrings become ``[redacted]``. Four families of detectors report spans:

- token shapes: the provider detectors of detect-secrets, used as plain regex objects (its
  `scan_line` entry point mutates process-wide settings and may verify secrets over the network,
  neither of which belongs on a worker thread), plus our own for the platforms we serve, for keys
  it misses or half-matches, for private key blocks, Vault tokens, basic-auth headers and URLs;
- keyword assignments (``password=…``, ``"api_key": "…"``, ``--password …``): the keyword list of
  detect-secrets' KeywordDetector plus ours; the identifier must END with a keyword
  (``max_tokens: 4096`` and ``password_policy: strict`` are not secrets);
- detect-secrets' keyword syntaxes for code (``secret("…")``, ``password => "…"``, ``"…" ==
  password``, Go's ``:=``…), restricted to quoted values: unquoted, its expressions take the rest of
  the line, which is right for a scanner that reports a line and wrong for a span in prose;
- natural-language disclosures: "my password is X", "the wifi password for the office: X", "X is my
  password", "vault token X", "my PIN is 4821", ``mysql -pX``, ``curl -u user:X``. Prose mentions
  secrets far more often than it discloses one, so a value must look like a secret (a digit next to
  letters, a symbol, inner capitals, or length; a hex string must pass detect-secrets' hex entropy
  test) and must not be a placeholder, path, date, version or reference. A bare number counts only
  for passwords and PINs; a PIN only with "is"/":"/"=" ("GPIO pin 13" is not one). "key" alone
  names too many things (primary key, key change), so it counts qualified (api, access, wifi…) or
  before a random hex string of 32 or more characters (not after "cache", "primary", "gpg"…).

Cost: this runs on every message, so each detector has a gate checked before its regex runs (a
literal it needs, as written or lowered; a run of token characters as long as its shape; or a
cheap probe that starts with a literal), and keyword logic runs only where a keyword occurs. The
detect-secrets expressions have no line anchors that matter (``\\s`` already covers a newline),
so they run over the whole text, not line by line.

Layout: this module holds the public API and the pass; `_view` the scanned text, the gates and
what a value looks like; `_shapes` the token shapes; `_keywords` the keyword, code and prose rules.

Redaction is positional: overlapping spans are merged and each is replaced once, so a short
detected value never blanks unrelated occurrences of the same text. Existing ``[redacted]`` markers
are atomic, and passes repeat until nothing changes; each pass strictly shrinks the unredacted
text, so this terminates and ``redact`` is idempotent.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from memory.trust.redact._keywords import _keyword_spans
from memory.trust.redact._shapes import _TOKEN_PATTERNS, _detector_spans
from memory.trust.redact._view import Span, _View

__all__ = ["REDACTED", "contains_secret", "redact"]

REDACTED = "[redacted]"

# Extra strings shorter than this are ignored: a configured "secret" of one to three characters
# would blank every occurrence of those letters in every memory file.
_MIN_EXTRA = 4
# Safety net only: each pass strictly shrinks the unredacted text, real input settles in two.
_MAX_PASSES = 32


# --- the pass ----------------------------------------------------------------------------------


def _extra_spans(text: str, extras: tuple[str, ...]) -> Iterator[Span]:
    for extra in extras:
        start = text.find(extra)
        while start >= 0:
            yield start, start + len(extra)
            start = text.find(extra, start + len(extra))


def _replace(text: str, spans: Iterable[Span]) -> str:
    out: list[str] = []
    cursor = 0
    for start, end in sorted(spans):
        if end <= cursor:
            continue
        if start > cursor:
            out.append(text[cursor:start])
        elif out and out[-1] == REDACTED:  # overlapping or touching: one marker for the lot
            cursor = max(cursor, end)
            continue
        out.append(REDACTED)
        cursor = end
    out.append(text[cursor:])
    return "".join(out)


def _redact_piece(piece: str, extras: tuple[str, ...]) -> str:
    if not piece:
        return piece
    view = _View(piece)
    spans: list[Span] = list(_extra_spans(piece, extras))
    for pattern in _TOKEN_PATTERNS:
        if pattern.gate.opens(view):
            spans.extend(pattern.spans(view))
    spans.extend(_detector_spans(view))
    spans.extend(_keyword_spans(view))
    return _replace(piece, spans) if spans else piece


def _one_pass(text: str, extras: tuple[str, ...]) -> str:
    # Markers are atomic: no detector may match across or inside one.
    return REDACTED.join(_redact_piece(piece, extras) for piece in text.split(REDACTED))


def _extras(extra: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted({e for e in extra if len(e) >= _MIN_EXTRA and e != REDACTED}, key=len, reverse=True))


def redact(text: str, extra: Iterable[str] = ()) -> str:
    """Return `text` with every secret-like substring, and every string of `extra` (the gateway's
    own configured secrets), replaced by ``[redacted]``. Pure and thread-safe."""
    extras = _extras(extra)
    for _ in range(_MAX_PASSES):
        redacted = _one_pass(text, extras)
        if redacted == text:
            break
        text = redacted
    return text


def contains_secret(text: str, extra: Iterable[str] = ()) -> bool:
    """True when `redact` would change `text`: exactly when its first pass does, since every pass
    that changes anything leaves less unredacted text, never the original again."""
    return _one_pass(text, _extras(extra)) != text
