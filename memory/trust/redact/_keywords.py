"""Keywords: assignments, detect-secrets' code syntaxes, and natural-language disclosures (see
memory.trust.redact)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from detect_secrets.plugins import keyword as ds_keyword

from memory.trust.redact._view import (
    _HEX_VALUE,
    _NOT_SECRET_SHAPE,
    _TOKEN_LIKE,
    _TRAILING,
    Span,
    _Gate,
    _has_digit,
    _has_letter,
    _has_symbol,
    _inner_capitals,
    _looks_secret,
    _reference,
    _strong,
    _trim,
    _View,
)

# --- keywords: assignments, code syntaxes, prose -------------------------------------------------

# detect-secrets' keyword list ("api_?key" → "apikey": identifiers are compared folded), plus ours.
_KEY_WORDS = tuple(
    sorted(
        {w.replace("_?", "") for w in ds_keyword.DENYLIST}
        | {"token", "passphrase", "passcode", "secretkey", "accesskey", "privatekey"}
    )
)
# Every keyword above and every noun below contains one of these; found in the lowered text.
_ANCHOR = re.compile(r"p(?:ass|wd|w\b|in\b)|secret|token|key|contrase")  # no leading \b: it defeats sre's fast scan
_ANCHOR_GATE = _Gate(folded=("pass", "pwd", "pw", "secret", "token", "key", "pin", "contrase"))

_AFTER_KEY = re.compile(
    r"""["'\]]{0,2}[*_]*[^\S\n]*(?P<sep>:=|=(?![=>])|:(?![:/]))(?P<gap>[*_]*[^\S\n]*)"""
    r"""(?:"(?P<dq>[^"\n]+)"|'(?P<sq>[^'\n]+)'|`(?P<bq>[^`\n]+)`|(?P<bare>[^\s"'`,;()\[\]{}<>*=:][^\s"'`,;()\[\]{}<>]*))"""
)
_FLAG_VALUE = re.compile(r"""[^\S\n]+(?:"(?P<dq>[^"\n]+)"|'(?P<sq>[^'\n]+)'|(?P<bare>[^\s"'`-][^\s"'`]*))""")
_WORD = re.compile(r"\S+")
_SENTENCE_END = (".", ":")  # "password=hunter2." ends a sentence; "!" and "?" may be part of it


# Every syntax KeywordDetector knows for any file type, keyed to the group holding the value. Each
# has the (possibly optional) quote just before the value; a value counts only when quoted.
_DS_SYNTAXES: dict[re.Pattern[str], int] = {
    regex: group
    for mapping in (*ds_keyword.REGEX_BY_FILETYPE.values(), ds_keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP)
    for regex, group in mapping.items()
}
_DS_REVERSED = ds_keyword.PRECEDED_BY_EQUAL_COMPARISON_SIGNS_QUOTES_REQUIRED_REGEX  # "…" == password
_DS_FORWARD = tuple((rx, group) for rx, group in _DS_SYNTAXES.items() if rx is not _DS_REVERSED)


# "pass" as a whole name or after a separator (SMTP_PASS, user.pass); never bypass or compass.
_PASS_KEY = re.compile(r"(?i)(?:^|[_.-])pass$")


_NOT_ALNUM = re.compile(r"[\W_]")


def _is_secret_key(key: str) -> bool:
    folded = _NOT_ALNUM.sub("", key).casefold()
    return folded.endswith(_KEY_WORDS)


def _ident_char(c: str) -> bool:
    return c.isalnum() or c in "_-."


def _identifier(text: str, start: int, end: int) -> Span:
    """The identifier around a keyword found at text[start:end]: db.password, --db-password."""
    while start > 0 and _ident_char(text[start - 1]):
        start -= 1
    n = len(text)
    while end < n and (
        text[end].isalnum() or text[end] in "_-" or (text[end] == "." and end + 1 < n and text[end + 1].isalnum())
    ):
        end += 1
    return start, end


def _assignment_spans(text: str, start: int, end: int, *, weak: bool = False) -> Iterator[Span]:
    """`text[start:end]` is an identifier ending with a keyword: the value assigned to it. `weak`:
    the key may name something else (SMTP_PASS, but also first_pass), so the value must look like
    a secret even when written without a space."""
    match = _AFTER_KEY.match(text, end)
    if match is None:
        if text[start] == "-":  # --password hunter2
            flag = _FLAG_VALUE.match(text, end)
            if flag is not None:
                name = next(g for g in ("dq", "sq", "bare") if flag.group(g) is not None)
                value_start = flag.start(name)
                value_start, value_end = _trim(value_start, flag.group(name))
                if value_end > value_start and _looks_secret(text[value_start:value_end]):
                    yield value_start, value_end
        return
    for name in ("dq", "sq", "bq"):
        if match.group(name) is not None:
            if not _reference(match.group(name)) and not (weak and not _looks_secret(match.group(name))):
                yield match.span(name)
            return
    value_start = match.start("bare")
    value = match.group("bare")
    value = value[:-1] if value.endswith(_SENTENCE_END) else value
    word = _WORD.match(text, value_start)
    if not value or _reference(value) or (word is not None and _reference(word.group().rstrip(_TRAILING))):
        return  # ${DB_PASSWORD}: the bare value stops at "{", the reference does not
    after = value_start + len(match.group("bare"))
    if after < len(text) and text[after] in "([":
        return  # password=getpass(), api_key=environ["KEY"]: code that fetches the secret
    # With a space after the sign, or after a bare colon ("token:refresh" is a label), the value
    # must look like a secret; "password=hunter" needs no more.
    if (weak or match.group("gap") or match.group("sep") == ":") and not _looks_secret(value):
        return
    yield value_start, value_start + len(value)


def _ds_syntax_spans(text: str, start: int, end: int, keyword: int, line_end: int) -> Iterator[Span]:
    """detect-secrets' keyword expressions, tried where a keyword may begin inside the identifier
    text[start:end] (they start with the keyword): after each separator, and where we found one.
    `match`, not `search`: a search would rescan the rest of the line for every keyword."""
    candidates = {keyword}
    candidates.update(i + 1 for i in range(start, end) if text[i] in "_-.")
    candidates.add(start)
    for pos in sorted(candidates):
        for regex, group in _DS_FORWARD:
            match = regex.match(text, pos, line_end)
            if match is not None:
                yield from _quoted_value(match, group)


def _quoted_value(match: re.Match[str], group: int) -> Iterator[Span]:
    quote = match.group(group - 1)
    value = match.group(group)
    if quote and value and quote not in value and not _reference(value):
        yield match.span(group)


# Prose. The noun, then an optional "for the router", then "is"/":"/"was changed to", then the value.
_NOUN = re.compile(
    r"(?i)(pass(?:word|wd|phrase|code)|pwd|pw|secret|token|pin(?:[ ]?code)?|key|contrase[ñn]a)s?(?![\w-])"
)
_PASSWORD_NOUNS = ("pass", "pwd", "pw", "contrase")
_DISCLOSURE = re.compile(
    r"""(?ix)
    (?:
      (?:[^\S\n]+(?:for|to|of|on|at|in|from)[^\S\n]+(?:[^\n:=.!?;]|\.(?=\S)){1,40}?)?   # for the router
      (?:
        (?P<colon>[^\S\n]*(?::|=|->|\u2192)[^\S\n]*)
      | (?:[^\S\n]+(?:is|was|are|were|became|has[^\S\n]+been|had[^\S\n]+been|will[^\S\n]+be)|'s|\u2019s)
        (?:[^\S\n]+(?:now|still|actually|just|currently|simply|always|also))?
        (?:[^\S\n]+(?:set|changed|reset|updated))?(?:[^\S\n]+to)?[^\S\n]*:?[^\S\n]+
      )
    | (?P<bare>[^\S\n]+)                             # no verb: "with password X"
    )
    (?:"(?P<dq>[^"\n]{1,200})"|'(?P<sq>[^'\n]{1,200})'|\u201c(?P<cq>[^\u201d\n]{1,200})\u201d|`(?P<bq>[^`\n]{1,200})`
      |(?P<word>[^\s"'`\u201c\u201d]{1,200}))
    """
)
_QUOTED_NAMES = ("dq", "sq", "cq", "bq")
# "key" alone is a primary key, a key change, a keyboard key; these name secret ones.
_KEY_QUALIFIER = re.compile(
    r"(?i)(?<![a-z])(?:api|access|secret|private|auth|license|licence|product|activation|recovery|master"
    r"|encryption|signing|wifi|wi-fi|wpa2?|deploy|client|app|service|account|admin|root|openai|anthropic"
    r"|stripe|aws|gcp|azure|github|gitlab|slack|telegram|discord)[\s_-]?$"
)
_PUBLIC_KEY = re.compile(
    r"(?i)(?<![a-z])(?:cache|primary|foreign|composite|sort|partition|hash|lookup|object|idempotency|dedup"
    r"|public|gpg|pgp|ssh|host|map|dict|index|row|cluster|shard)[\s_-]?$"
)
_MIN_HEX_KEY = 32
# "hunter2 is my password." — the noun must end the clause ("1Password is my password manager").
_REVERSED = re.compile(
    r"(?i)(?:^|(?<=\s))(?P<v>[^\s\"'`]{4,200})[^\S\n]+(?:is|was)[^\S\n]+(?:my|our|your|his|her|their|the)"
    r"[^\S\n]+(?:[\w-]+[^\S\n]+){0,2}$"
)
_CLAUSE_END = re.compile(r"(?i)[^\S\n]*(?:$|[.,;!?)]|[^\S\n]+(?:and|but|so|for|on|at|now|too|again)\b)", re.M)


def _bare_password(value: str) -> bool:
    """'log in with password Tr0ub4dor&3': no "is" to go by, so only an unmistakable password."""
    return (
        len(value) >= 8
        and _has_letter(value)
        and _has_digit(value)
        and (_inner_capitals(value) or _has_symbol(value))
        and not _reference(value)
        and not _NOT_SECRET_SHAPE.fullmatch(value)
    )


def _accepts(kind: str, how: str, value: str) -> bool:
    """`how`: "verb" (is, was changed to), "sign" (":", "=") or "bare" (nothing between)."""
    if kind == "pin":
        return how != "bare" and value.isdigit() and 4 <= len(value) <= 8
    if how == "bare":
        if kind == "password":
            return _bare_password(value)
        # "vault token s.Qf1…": only something shaped like a token, never a word or markup
        return bool(_TOKEN_LIKE.fullmatch(value)) and _has_digit(value) and _strong(value, digits=False)
    return _strong(value, digits=kind == "password", words=how == "verb")


def _kind(noun: str) -> str:
    noun = noun.lower()
    if noun.startswith("pin"):
        return "pin"
    if noun.startswith(_PASSWORD_NOUNS):
        return "password"
    return noun.rstrip("s") if noun in ("tokens", "secrets", "keys") else noun


def _disclosure_spans(text: str, lower: str, start: int, line_start: int) -> Iterator[Span]:
    """A secret noun at text[start:]: what the sentence says it is."""
    before = text[start - 1] if start > 0 else " "
    if before.isalnum():
        return
    noun = _NOUN.match(text, start)
    if noun is None:
        return
    kind = _kind(noun.group(1))
    if kind == "pin" and before in "_-":
        return
    hex_only = False
    if kind == "key" and _KEY_QUALIFIER.search(lower, max(line_start, start - 20), start) is None:
        # Unqualified, a key counts only as a long random hex string, and not after a word naming
        # a key that is no secret (a cache key is a hash, a GPG key id is public).
        if _PUBLIC_KEY.search(lower, max(line_start, start - 20), start) is not None:
            return
        hex_only = True
    match = _DISCLOSURE.match(text, noun.end())
    if match is not None:
        name = next(g for g in (*_QUOTED_NAMES, "word") if match.group(g) is not None)
        if name == "word":
            value_start, value_end = _trim(match.start("word"), match.group("word"))
        else:
            value_start, value_end = match.span(name)
        value = text[value_start:value_end]
        if match.group("bare") is not None:
            how = "bare" if name == "word" and not noun.group().lower().endswith("s") else ""
        else:
            how = "sign" if match.group("colon") is not None else "verb"
        if before == "_" and how != "verb":
            how = ""  # summary_tokens=…, cost_per_token: CostPerToken: code, left to the assignment rules
        if hex_only and not (len(value) >= _MIN_HEX_KEY and _HEX_VALUE.fullmatch(value)):
            how = ""
        if value and how and _accepts(kind, how, value):
            yield value_start, value_end
    if kind != "pin" and not hex_only and _CLAUSE_END.match(text, noun.end()):
        reversed_ = _REVERSED.search(text, max(line_start, start - 120), start)
        if reversed_ is not None:
            value_start, value_end = _trim(reversed_.start("v"), reversed_.group("v"))
            if value_end > value_start and _strong(text[value_start:value_end], digits=kind == "password"):
                yield value_start, value_end


@dataclass(slots=True)
class _Line:
    """The line a keyword sits on, looked up once for all the keywords on it."""

    start: int = 0
    end: int = -1
    quoted: bool = False
    compared: bool = False
    reversed_done: bool = False

    def move_to(self, text: str, pos: int) -> None:
        if self.start <= pos <= self.end:
            return
        self.start = text.rfind("\n", 0, pos) + 1
        end = text.find("\n", pos)
        self.end = len(text) if end < 0 else end
        line = text[self.start : self.end]
        self.quoted = '"' in line or "'" in line or "`" in line
        self.compared = "==" in line or "!=" in line
        self.reversed_done = False


def _keyword_spans(view: _View) -> Iterator[Span]:
    if not _ANCHOR_GATE.opens(view):
        return
    text, lower = view.text, view.lower
    seen: set[int] = set()
    line = _Line()
    for anchor in _ANCHOR.finditer(lower):
        line.move_to(text, anchor.start())
        yield from _disclosure_spans(text, lower, anchor.start(), line.start)
        start, end = _identifier(text, anchor.start(), anchor.end())
        if start in seen:
            continue
        seen.add(start)
        core = text[start:end].lstrip("-.")
        if not core or not core[0].isalpha():
            continue
        if not _is_secret_key(core):
            if _PASS_KEY.search(core):
                yield from _assignment_spans(text, start, end, weak=True)
            continue
        yield from _assignment_spans(text, start, end)
        if line.quoted:
            yield from _ds_syntax_spans(text, start, end, anchor.start(), line.end)
            if line.compared and not line.reversed_done:
                line.reversed_done = True  # a search over the whole line: once per line
                for match in _DS_REVERSED.finditer(text, line.start, line.end):
                    yield from _quoted_value(match, 2)
