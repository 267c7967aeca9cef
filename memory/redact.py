"""Secret redaction for text that is about to be remembered (DESIGN §4-5: memory people can trust).

Anything written to a memory file outlives the chat it came from and is later searched and shown
to the model, so a token pasted into a conversation must not survive the trip. `redact` replaces
every secret-like substring with ``[redacted]``: the provider-specific detectors of detect-secrets
(used directly, as plain regex objects: its `scan_line` entry point mutates process-wide settings
and may verify secrets over the network, neither of which belongs on a worker thread), plus our
own patterns for the platforms we serve, for provider keys that detect-secrets misses or only
half-matches, for private key blocks and for ``password=…``-style assignments.

Redaction is positional: every detector reports spans, overlapping spans are merged and each is
replaced once, so a short detected value never blanks unrelated occurrences of the same text.
Existing ``[redacted]`` markers are treated as atomic, and passes repeat until nothing changes;
each pass strictly shrinks the unredacted text, so this terminates and ``redact`` is idempotent.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from detect_secrets.plugins.artifactory import ArtifactoryDetector
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.cloudant import CloudantDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString
from detect_secrets.plugins.ibm_cloud_iam import IbmCloudIamDetector
from detect_secrets.plugins.ibm_cos_hmac import IbmCosHmacDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.softlayer import SoftlayerDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

__all__ = ["REDACTED", "contains_secret", "redact"]

REDACTED = "[redacted]"

# Extra strings shorter than this are ignored: a configured "secret" of one to three characters
# would blank every occurrence of those letters in every memory file.
_MIN_EXTRA = 4
# Safety net only: each pass strictly shrinks the unredacted text, real input settles in two.
_MAX_PASSES = 32

Span = tuple[int, int]


# --- our own patterns --------------------------------------------------------------------------


def _has_digit(value: str) -> bool:
    return any(c.isdigit() for c in value)


def _mixed(value: str) -> bool:
    """Random tokens mix cases and digits; dotted code paths and host names rarely do."""
    return _has_digit(value) and any(c.isupper() for c in value) and any(c.islower() for c in value)


@dataclass(frozen=True, slots=True)
class _Pattern:
    regex: re.Pattern[str]
    group: int = 0
    accept: Callable[[str], bool] | None = None

    def spans(self, text: str) -> Iterator[Span]:
        for match in self.regex.finditer(text):
            start, end = match.span(self.group)
            if end > start and (self.accept is None or self.accept(match.group(self.group))):
                yield start, end


_TOKEN_PATTERNS = (
    # Whole PEM private key blocks; a truncated block (no END line) is redacted to the end.
    _Pattern(
        re.compile(
            r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY((?: BLOCK)?)-----.*?(?:-----END \1PRIVATE KEY\2-----|\Z)",
            re.DOTALL,
        )
    ),
    _Pattern(re.compile(r"PuTTY-User-Key-File-\d+:.*?(?:Private-MAC:[^\S\n]*\S+|\Z)", re.DOTALL)),
    # OpenAI (sk-…, sk-proj-…) and Anthropic (sk-ant-…) keys.
    _Pattern(re.compile(r"(?:sk-(?:ant|proj)-|(?<![\w-])sk-)[A-Za-z0-9_-]{20,}"), accept=_has_digit),
    # Slack bot/user/app tokens. Distinctive prefixes match even when glued to other text.
    _Pattern(re.compile(r"(?:xox[abprs]|xapp)-[A-Za-z0-9-]{10,}")),
    # Telegram bot tokens: <bot id>:<secret>.
    _Pattern(re.compile(r"(?<![\w:])\d{6,12}:[A-Za-z0-9_-]{30,}")),
    # Discord bot tokens: base64(user id).timestamp.hmac.
    _Pattern(
        re.compile(r"(?<![\w.-])[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{4,10}\.[A-Za-z0-9_-]{20,}(?![\w-])"),
        accept=_mixed,
    ),
    # GitHub classic and fine-grained tokens.
    _Pattern(re.compile(r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})")),
    # AWS access key ids.
    _Pattern(re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9])")),
    # Google API keys.
    _Pattern(re.compile(r"AIza[0-9A-Za-z_-]{35}")),
    # JWTs: header.payload.signature, both JSON parts starting with '{"'.
    _Pattern(re.compile(r"eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*")),
    # Authorization: Bearer <token>.
    _Pattern(re.compile(r"(?i)(?<![\w-])bearer[^\S\n]+([A-Za-z0-9._~+/-]{16,}=*)"), group=1, accept=_has_digit),
)

# password / secret / token / api key assignments: the identifier must END with the keyword
# ("max_tokens: 4096" and "token_count=3" are not secrets), the value is redacted, the key kept.
_KEY_WORDS = ("password", "passwd", "passphrase", "secret", "token", "apikey", "secretkey", "accesskey", "privatekey")
_ASSIGNMENT = re.compile(
    r"""(?<![\w.-])["']?(?P<key>[A-Za-z][\w.-]*)["']?[*_]*[^\S\n]*"""
    r"""(?P<sep>:=|=(?![=>])|:(?![:/]))(?P<gap>[*_]*[^\S\n]*)"""
    r"""(?:"(?P<dq>[^"\n]+)"|'(?P<sq>[^'\n]+)'|`(?P<bq>[^`\n]+)`|(?P<bare>[^\s"'`,;()\[\]{}<>*][^\s"'`,;()\[\]{}<>]*))"""
)
_DOTTED_PATH = re.compile(r"[A-Za-z_]+(?:\.[A-Za-z_]+)+")
_SENTENCE_END = (".", ":")  # "password=hunter2." ends a sentence; "!" and "?" may be part of it


def _is_secret_key(key: str) -> bool:
    folded = re.sub(r"[\W_]", "", key).casefold()
    return folded.endswith(_KEY_WORDS)


def _looks_secret(value: str) -> bool:
    """For 'Password: hunter2' written as prose: a value after a space must look like one."""
    if _DOTTED_PATH.fullmatch(value):  # token = os.environ
        return False
    return _has_digit(value) or not value.isalpha() or len(value) >= 16


def _assignment_spans(text: str) -> Iterator[Span]:
    for match in _ASSIGNMENT.finditer(text):
        if not _is_secret_key(match.group("key")):
            continue
        for name in ("dq", "sq", "bq"):
            if match.group(name) is not None:
                yield match.span(name)
                break
        else:
            start = match.start("bare")
            value = match.group("bare")
            value = value[:-1] if value.endswith(_SENTENCE_END) else value
            if not value:
                continue
            if match.group("gap") and not _looks_secret(value):
                continue
            yield start, start + len(value)


# --- detect-secrets detectors ------------------------------------------------------------------

# Provider-specific detectors only. Left out: KeywordDetector (ours above keeps the key and knows
# "max_tokens" is not a secret), HexHighEntropyString (commit hashes and UUIDs are everyday chat),
# IPPublicDetector (an address is not a credential) and PrivateKeyDetector (it matches the BEGIN
# line only; our PEM pattern takes the whole block).
_REGEX_DETECTORS: tuple[RegexBasedDetector, ...] = (
    ArtifactoryDetector(),
    AWSKeyDetector(),
    AzureStorageKeyDetector(),
    BasicAuthDetector(),
    CloudantDetector(),
    DiscordBotTokenDetector(),
    GitHubTokenDetector(),
    GitLabTokenDetector(),
    IbmCloudIamDetector(),
    IbmCosHmacDetector(),
    MailchimpDetector(),
    NpmDetector(),
    OpenAIDetector(),
    PypiTokenDetector(),
    SendGridDetector(),
    SlackDetector(),
    SoftlayerDetector(),
    SquareOAuthDetector(),
    StripeDetector(),
    TelegramBotTokenDetector(),
    TwilioKeyDetector(),
)
_JWT = JwtTokenDetector()
_BASE64 = Base64HighEntropyString()  # quoted strings only, entropy above 4.5 bits per character
_DELIMITERS = " \t\"'=:"  # some detectors include the delimiters around the token in the match


def _detector_spans_in_line(line: str) -> Iterator[Span]:
    for detector in _REGEX_DETECTORS:
        for regex in detector.denylist:
            for match in regex.finditer(line):
                if regex.groups:  # the same submatches RegexBasedDetector.analyze_string yields
                    spans = [match.span(i) for i in range(1, regex.groups + 1) if match.group(i)]
                else:
                    spans = [match.span()]
                for start, end in spans:
                    text = line[start:end]
                    start += len(text) - len(text.lstrip(_DELIMITERS))
                    end -= len(text) - len(text.rstrip(_DELIMITERS))
                    if end > start:
                        yield start, end
    for regex in _JWT.denylist:
        for match in regex.finditer(line):
            if _JWT.is_formally_valid(match.group()):
                yield match.span()
    for match in _BASE64.regex.finditer(line):
        if _BASE64.calculate_shannon_entropy(match.group(2)) > _BASE64.entropy_limit:
            yield match.span(2)


def _detector_spans(text: str) -> Iterator[Span]:
    """detect-secrets' expressions are written for single lines (``^``, ``$``, ``\\s``)."""
    offset = 0
    for line in text.splitlines(keepends=True):
        for start, end in _detector_spans_in_line(line):
            yield offset + start, offset + end
        offset += len(line)


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
    spans: list[Span] = list(_extra_spans(piece, extras))
    for pattern in _TOKEN_PATTERNS:
        spans.extend(pattern.spans(piece))
    spans.extend(_assignment_spans(piece))
    spans.extend(_detector_spans(piece))
    return _replace(piece, spans) if spans else piece


def _one_pass(text: str, extras: tuple[str, ...]) -> str:
    # Markers are atomic: no detector may match across or inside one.
    return REDACTED.join(_redact_piece(piece, extras) for piece in text.split(REDACTED))


def redact(text: str, extra: Iterable[str] = ()) -> str:
    """Return `text` with every secret-like substring, and every string of `extra` (the gateway's
    own configured secrets), replaced by ``[redacted]``. Pure and thread-safe."""
    extras = tuple(sorted({e for e in extra if len(e) >= _MIN_EXTRA and e != REDACTED}, key=len, reverse=True))
    for _ in range(_MAX_PASSES):
        redacted = _one_pass(text, extras)
        if redacted == text:
            break
        text = redacted
    return text


def contains_secret(text: str, extra: Iterable[str] = ()) -> bool:
    """True when `redact` would change `text`."""
    return redact(text, extra) != text
