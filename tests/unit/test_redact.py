from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory.trust.redact import REDACTED, contains_secret, redact

# Obviously fake values with the right shape, assembled here so no live-looking secret sits in
# the source.
ALNUM = "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv1Wx2Yz3" * 3


def _b64url(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


FAKE_TOKENS = {
    "openai": "sk-" + ALNUM[:48],
    "openai project": "sk-proj-" + ALNUM[:64],
    "anthropic": "sk-ant-api03-" + ALNUM[:80],
    "slack bot": "xoxb-" + "1" * 12 + "-" + "2" * 13 + "-" + ALNUM[:24],
    "slack user": "xoxp-" + "1" * 12 + "-" + "3" * 12 + "-" + ALNUM[:32],
    "slack app": "xapp-1-A" + "0" * 10 + "-" + "4" * 13 + "-" + "ab12" * 16,
    "telegram": "1234567890:" + "AA" + ALNUM[:33],
    "discord": "MT" + ALNUM[:24] + ".Gx1Yz2." + ALNUM[:38],
    "github classic": "ghp_" + ALNUM[:36],
    "github oauth": "gho_" + ALNUM[:36],
    "github server": "ghs_" + ALNUM[:36],
    "github fine-grained": "github_pat_11" + ALNUM[:20] + "_" + ALNUM[:59],
    "aws": "AKIA" + "ABCDEFGH12345678",
    "google": "AIza" + ALNUM[:35],
    "jwt": _b64url({"alg": "HS256", "typ": "JWT"}) + "." + _b64url({"sub": "1234", "n": 1}) + "." + ALNUM[:43],
    "stripe (detect-secrets)": "sk_" + "live_" + ALNUM[:24],
    "sendgrid (detect-secrets)": "SG." + ALNUM[:22] + "." + ALNUM[:43],
}


@pytest.mark.parametrize("name", sorted(FAKE_TOKENS))
@pytest.mark.parametrize(
    "template",
    ["{}", "my token is {} ok", "use `{}` please", "key: '{}'", "({}).", "line one\nthen {}\nline three"],
)
def test_token_shapes_are_redacted(name: str, template: str) -> None:
    token = FAKE_TOKENS[name]
    text = template.format(token)
    out = redact(text)
    assert token not in out
    assert out == template.format(REDACTED)
    assert contains_secret(text)


def test_pem_private_key_block_is_redacted_whole() -> None:
    body = "\n".join(["MIIEow" + "A" * 58] + ["B" * 64] * 5 + ["Cw=="])
    text = f"here it is:\n-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----\nthanks"
    assert redact(text) == f"here it is:\n{REDACTED}\nthanks"
    for kind in ("", "EC ", "OPENSSH ", "ENCRYPTED "):
        block = f"-----BEGIN {kind}PRIVATE KEY-----\n{body}\n-----END {kind}PRIVATE KEY-----"
        assert redact(block) == REDACTED
    truncated = f"oops -----BEGIN PRIVATE KEY-----\n{body}"
    assert redact(truncated) == f"oops {REDACTED}"
    assert redact("-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----").startswith("-----BEGIN PUBLIC")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("password=hunter2", "password=[redacted]"),
        ("Password: hunter2", "Password: [redacted]"),
        ("passwd = s3cret!", "passwd = [redacted]"),
        ("DB_PASSWORD=correcthorse", "DB_PASSWORD=[redacted]"),
        ("export SLACK_BOT_TOKEN=abc123def", "export SLACK_BOT_TOKEN=[redacted]"),
        ("client_secret: 'a b c'", "client_secret: '[redacted]'"),
        ('{"api_key": "abc123", "n": 1}', '{"api_key": "[redacted]", "n": 1}'),
        ("apiKey=zzz9, next", "apiKey=[redacted], next"),
        ("X-Api-Key: 0a1b2c3d4e", "X-Api-Key: [redacted]"),
        ("https://host/cb?access_token=abc123&x=1", "https://host/cb?access_token=[redacted]"),
        ("**Password:** hunter2.", "**Password:** [redacted]."),
        ("Authorization: Bearer abcDEF1234567890xyz", "Authorization: Bearer [redacted]"),
    ],
)
def test_assignments_keep_the_key(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_extra_strings_are_redacted_exactly() -> None:
    text = "the relay pass is plum-tree-77 and the other is q9q9q9, also plum-tree-7"
    out = redact(text, extra=["plum-tree-77", "q9q9q9", ""])
    assert out == "the relay pass is [redacted] and the other is [redacted], also plum-tree-7"
    assert contains_secret("say q9q9q9", extra=("q9q9q9",))
    # Too short to be a secret: would blank ordinary words everywhere.
    assert redact("a cat", extra=["a", "cat"]) == "a cat"


ORDINARY = [
    "Let's meet at 12:30 on 2024-05-01 near https://example.com/docs?page=2#intro.",
    "The brand colour is #ff00aa, the accent #0af; commit 3f2a9c1d4e5b6a7980112233445566778899aabb.",
    "Set max_tokens: 4096 and token_count=3, temperature=0.7 for the summary model.",
    "The secret: we ship on Friday. Token: see the docs.",
    "I forgot my password again, can you remind me how to reset it?",
    "token = os.environ['SLACK_BOT_TOKEN']",
    "if token == expected: return True",
    "I paid $1,234.56 on 3/4/2024; call +1 (555) 123-4567.",
    "See ACME-1234 and PR #42; uuid 123e4567-e89b-12d3-a456-426614174000.",
    "The module gateway.session.budget lives in gateway/session/budget.py.",
    "Alice (u-3f2a) wrote in telegram:group:-100123:42 about the sk-learn pipeline.",
    "Rust's Result<T, E>; C++ std::vector<int>; x => y; a->b; f(x) = x**2",
    "Die Übergabe ist am Montag, 10:00 Uhr. 会议在星期一。Встреча в понедельник.",
    "```python\ndef add(a: int, b: int) -> int:\n    return a + b\n```",
    "Bearer of bad news: the build failed 3 times.",
    "The Discord server is discord.gg/example and the bot replies in #general.",
    "- [ ] write tests\n- [x] ship it",
]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_is_left_byte_identical(text: str) -> None:
    assert redact(text) == text
    assert not contains_secret(text)


def test_redaction_markers_are_stable() -> None:
    assert redact(REDACTED) == REDACTED
    assert redact("password=[redacted]") == "password=[redacted]"
    twice = "token: " + FAKE_TOKENS["github classic"] + " " + FAKE_TOKENS["aws"]
    assert redact(twice) == "token: [redacted] [redacted]"


_FRAGMENTS = [*FAKE_TOKENS.values(), "password=", "token: ", "Bearer ", REDACTED, "-----BEGIN PRIVATE KEY-----", " "]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_redact_is_idempotent_and_total_on_any_text(text: str) -> None:
    once = redact(text)
    assert redact(once) == once


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(alphabet="ab1_-.:=[] \n'\"", max_size=12)), max_size=12))
def test_redact_is_idempotent_on_secret_soup(parts: list[str]) -> None:
    glued = redact("".join(parts), extra=["ab1_a"])
    assert redact(glued, extra=["ab1_a"]) == glued
    # Tokens glued to word characters may merge into one another; apart, none survives.
    apart = redact(" ".join(parts))
    for token in FAKE_TOKENS.values():
        assert token not in apart
