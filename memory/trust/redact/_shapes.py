"""Token shapes: our own patterns, and detect-secrets' provider detectors used as plain regex
objects (see memory.trust.redact)."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterator
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

from memory.trust.redact._view import (
    _COLON_RUN,
    _DOTTED_RUN,
    Span,
    _Gate,
    _has_digit,
    _inner_capitals,
    _mixed,
    _reference,
    _View,
)

# --- token shapes: our own patterns --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Pattern:
    regex: re.Pattern[str]
    gate: _Gate
    groups: tuple[int | str, ...] = (0,)  # the first that took part is the secret
    accept: Callable[[str], bool] | None = None

    def spans(self, view: _View) -> Iterator[Span]:
        for match in self.regex.finditer(view.text):
            group = next((g for g in self.groups if match.group(g) is not None), None)
            if group is None:
                continue
            start, end = match.span(group)
            if end > start and (self.accept is None or self.accept(match.group(group))):
                yield start, end


def _not_reference(value: str) -> bool:
    return not _reference(value)


def _basic_credentials(value: str) -> bool:
    """An Authorization: Basic value is base64 of 'user:password'; a word after "basic" is not."""
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return False
    _, colon, password = decoded.partition(":")
    return bool(colon and password) and decoded.isprintable()


def _random_looking(value: str) -> bool:
    return _has_digit(value) or _inner_capitals(value)


_QUOTED_OR_BARE = r"""(?:'(?P<sq>[^'\n]+)'|"(?P<dq>[^"\n]+)"|(?P<bare>[^\s'"]+))"""
_VALUE_GROUPS = ("sq", "dq", "bare")

_TOKEN_PATTERNS = (
    # Whole PEM private key blocks; a truncated block (no END line) is redacted to the end.
    _Pattern(
        re.compile(
            r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY((?: BLOCK)?)-----.*?(?:-----END \1PRIVATE KEY\2-----|\Z)",
            re.DOTALL,
        ),
        _Gate(cased=("PRIVATE KEY",)),
    ),
    _Pattern(
        re.compile(r"PuTTY-User-Key-File-\d+:.*?(?:Private-MAC:[^\S\n]*\S+|\Z)", re.DOTALL),
        _Gate(cased=("PuTTY-User-Key-File",)),
    ),
    # OpenAI (sk-…, sk-proj-…) and Anthropic (sk-ant-…) keys.
    _Pattern(
        re.compile(r"(?:sk-(?:ant|proj)-|(?<![\w-])sk-)[A-Za-z0-9_-]{20,}"),
        _Gate(cased=("sk-",), run=23),
        accept=_has_digit,
    ),
    # Slack bot/user/app tokens. Distinctive prefixes match even when glued to other text.
    _Pattern(re.compile(r"(?:xox[abprs]|xapp)-[A-Za-z0-9-]{10,}"), _Gate(cased=("xox", "xapp-"))),
    # Telegram bot tokens: <bot id>:<secret>.
    _Pattern(re.compile(r"(?<![\w:])\d{6,12}:[A-Za-z0-9_-]{30,}"), _Gate(run=30, probe=_COLON_RUN)),
    # Discord bot tokens: base64(user id).timestamp.hmac.
    _Pattern(
        re.compile(r"(?<![\w.-])[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{4,10}\.[A-Za-z0-9_-]{20,}(?![\w-])"),
        _Gate(run=20, probe=_DOTTED_RUN),
        accept=_mixed,
    ),
    # GitHub classic and fine-grained tokens.
    _Pattern(
        re.compile(r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
        _Gate(cased=("gh", "github_pat_"), run=33),
    ),
    # AWS access key ids.
    _Pattern(
        re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9])"),
        _Gate(cased=("AKIA", "ASIA")),
    ),
    # AWS secret access keys, which have no prefix: 40 base64 characters after a name for one.
    _Pattern(
        re.compile(
            r"(?i)(?<![a-z])aws[\w \t-]{0,30}?(?:secret|key)[\w \t-]{0,20}?[\s:=>\"']+"
            r"(?P<v>(?-i:[A-Za-z0-9/+]{40}))(?![A-Za-z0-9/+=])"
        ),
        _Gate(folded=("aws",)),
        groups=("v",),
        accept=_mixed,
    ),
    # Google API keys.
    _Pattern(re.compile(r"AIza[0-9A-Za-z_-]{35}"), _Gate(cased=("AIza",))),
    # JWTs: header.payload.signature, both JSON parts starting with '{"'.
    _Pattern(re.compile(r"eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"), _Gate(cased=("eyJ",))),
    # HashiCorp Vault service, batch and recovery tokens.
    _Pattern(
        re.compile(r"(?<![\w.])hv[sbr]\.[A-Za-z0-9_-]{20,}"),
        _Gate(cased=("hvs.", "hvb.", "hvr.")),
        accept=_random_looking,
    ),
    # Authorization: Bearer <token>.
    _Pattern(
        re.compile(r"(?i)(?<![\w-])bearer[^\S\n]+([A-Za-z0-9._~+/-]{16,}=*)"),
        _Gate(folded=("bearer",)),
        groups=(1,),
        accept=_has_digit,
    ),
    # Authorization: Basic base64(user:password).
    _Pattern(
        re.compile(r"(?i)(?<![\w-])basic[^\S\n]+([A-Za-z0-9+/]{4,}={0,2})(?![\w+/=-])"),
        _Gate(folded=("basic",)),
        groups=(1,),
        accept=_basic_credentials,
    ),
    # scheme://user:password@host, the password with any character a URL allows there.
    _Pattern(
        re.compile(r"://[^\s:/?#@]*:([^\s/?#@]+)@"),
        _Gate(cased=("://",)),
        groups=(1,),
        accept=_not_reference,
    ),
    # mysql -pSECRET (glued: "-p" alone prompts, "-p db" names a database); sshpass -p SECRET. The
    # command's arguments are bounded so that a line of many "mysql" stays linear.
    _Pattern(
        re.compile(rf"(?i)\b(?:mysql\w*|mariadb[\w-]*)\b[^\n|;&]{{0,200}}?(?<!\S)-p{_QUOTED_OR_BARE}"),
        _Gate(folded=("mysql", "mariadb")),
        groups=_VALUE_GROUPS,
        accept=_not_reference,
    ),
    _Pattern(
        re.compile(rf"(?i)\bsshpass\b[^\n|;&]{{0,200}}?(?<!\S)-p[^\S\n]*{_QUOTED_OR_BARE}"),
        _Gate(folded=("sshpass",)),
        groups=_VALUE_GROUPS,
        accept=_not_reference,
    ),
    # curl -u user:SECRET
    _Pattern(
        re.compile(
            r"""(?i)\bcurl\b[^\n|;&]{0,400}?(?<!\S)(?:-u|--user)(?:[^\S\n]+|=)?["']?[^\s:'"]+:(?P<v>[^\s'"]+)"""
        ),
        _Gate(folded=("curl",)),
        groups=("v",),
        accept=_not_reference,
    ),
)


# --- token shapes: detect-secrets' provider detectors -------------------------------------------

_DELIMITERS = " \t\"'=:"  # some detectors include the delimiters around the token in the match


@dataclass(frozen=True, slots=True)
class _Provider:
    detector: RegexBasedDetector
    gate: _Gate
    accept: Callable[[str], bool] | None = None

    def spans(self, view: _View) -> Iterator[Span]:
        text = view.text
        for regex in self.detector.denylist:
            for match in regex.finditer(text):
                if regex.groups:  # the same submatches RegexBasedDetector.analyze_string yields
                    spans = [match.span(i) for i in range(1, regex.groups + 1) if match.group(i)]
                else:
                    spans = [match.span()]
                for start, end in spans:
                    found = text[start:end]
                    start += len(found) - len(found.lstrip(_DELIMITERS))
                    end -= len(found) - len(found.rstrip(_DELIMITERS))
                    if end > start and (self.accept is None or self.accept(text[start:end])):
                        yield start, end


# Provider-specific detectors, each behind a gate derived from its expressions. Left out:
# HexHighEntropyString as a free-standing scan (commit hashes and UUIDs are everyday chat: it is
# used for values next to a keyword instead), IPPublicDetector (an address is not a credential)
# and PrivateKeyDetector (it matches the BEGIN line only; our PEM pattern takes the whole block).
_PROVIDERS = (
    _Provider(ArtifactoryDetector(), _Gate(cased=("AKC", "AP"))),
    _Provider(AWSKeyDetector(), _Gate(cased=("A3T", "ABIA", "ACCA", "AKIA", "ASIA"), folded=("aws",))),
    _Provider(AzureStorageKeyDetector(), _Gate(cased=("AccountKey=",))),
    # "postgres://user:password@localhost" in a how-to is a placeholder, not a credential.
    _Provider(BasicAuthDetector(), _Gate(cased=("://",)), accept=_not_reference),
    _Provider(CloudantDetector(), _Gate(folded=("cl",), run=24)),
    _Provider(DiscordBotTokenDetector(), _Gate(run=24, probe=_DOTTED_RUN)),
    _Provider(GitHubTokenDetector(), _Gate(cased=("gh",), run=40)),
    _Provider(GitLabTokenDetector(), _Gate(cased=("gl", "GR1348941"), run=25)),
    _Provider(IbmCloudIamDetector(), _Gate(folded=("key", "pwd", "pass", "token"), run=44)),
    _Provider(IbmCosHmacDetector(), _Gate(folded=("secret",), run=48)),
    _Provider(MailchimpDetector(), _Gate(cased=("-us",), run=32)),
    _Provider(NpmDetector(), _Gate(cased=("_authToken",))),
    _Provider(OpenAIDetector(), _Gate(cased=("T3BlbkFJ",))),
    _Provider(PypiTokenDetector(), _Gate(cased=("pypi-",))),
    _Provider(SendGridDetector(), _Gate(cased=("SG.",))),
    _Provider(SlackDetector(), _Gate(folded=("xox", "hooks.slack.com"))),
    _Provider(SoftlayerDetector(), _Gate(folded=("sl",), run=64)),
    _Provider(SquareOAuthDetector(), _Gate(cased=("sq0csp-",))),
    _Provider(StripeDetector(), _Gate(cased=("k_live_",))),
    _Provider(TelegramBotTokenDetector(), _Gate(run=35, probe=_COLON_RUN)),
    _Provider(TwilioKeyDetector(), _Gate(cased=("AC", "SK"), run=34)),
)
_JWT = JwtTokenDetector()
_JWT_GATE = _Gate(cased=("eyJ",))
_BASE64 = Base64HighEntropyString()  # quoted strings only, entropy above 4.5 bits per character
_BASE64_GATE = _Gate(cased=('"', "'"))


def _detector_spans(view: _View) -> Iterator[Span]:
    for provider in _PROVIDERS:
        if provider.gate.opens(view):
            yield from provider.spans(view)
    if _JWT_GATE.opens(view):
        for regex in _JWT.denylist:
            for match in regex.finditer(view.text):
                if _JWT.is_formally_valid(match.group()):
                    yield match.span()
    if _BASE64_GATE.opens(view):
        for match in _BASE64.regex.finditer(view.text):
            if _BASE64.calculate_shannon_entropy(match.group(2)) > _BASE64.entropy_limit:
                yield match.span(2)
