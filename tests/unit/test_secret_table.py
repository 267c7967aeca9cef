"""The secret detector, case by case: what must disappear from a chat message, and what must not.

Each positive case is a message and the one substring that is the secret: `redact` must replace
exactly that substring and keep every other character. Each negative case is ordinary chat that
talks about passwords, tokens and keys, or carries long ids, and must come back byte-identical.
All values are made up for these tests.
"""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory.trust.redact import REDACTED, contains_secret, redact

_HEX40 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b"
_HEX32 = "6f1ed002ab5595859014ebf0951522d9"
_AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # the example from AWS's documentation
_VAULT = "hvs." + "CAESIJx7Qm2pLk9vN3rT8wYz4aBcDeFgHiJkLmNoPqRsTuVw"
_VAULT_LEGACY = "s." + "Qf1s5zigZ4LX6vTz2pR8aBcD"
_BASIC = base64.b64encode(b"alice:S3cretPass!").decode()
_GITHUB = "ghp_" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv1Wx2"
_SLACK = "xoxb-" + "1" * 12 + "-" + "2" * 13 + "-" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8"
_OPENAI = "sk-proj-" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv1Wx2Yz3"
_TELEGRAM = "1234567890:" + "AAb1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv1W"

# The examples the detector used to let through.
REPORTED = [
    ("note: password=CorrectHorse88Battery", "CorrectHorse88Battery"),
    ("my password is Tr0ub4dor&3zebra", "Tr0ub4dor&3zebra"),
    ("the wifi password is Gr33nTea-Kettle, ask Bob if it fails", "Gr33nTea-Kettle"),
    (f"Authorization: Basic {_BASIC}", _BASIC),
    (f"my api token {_HEX40}", _HEX40),
    ("mysql -u root -pS3cretPass99 -h db.internal", "S3cretPass99"),
    (f"vault token {_VAULT}", _VAULT),
    (f"the aws secret is {_AWS_SECRET}", _AWS_SECRET),
]

# What people write when they tell someone a password.
PROSE = [
    ("My password is hunter22 btw", "hunter22"),
    ("The password for the router: Xk9#mPq2", "Xk9#mPq2"),
    ("the password to the admin panel is Sunflower2024!", "Sunflower2024!"),
    ("our VPN password was changed to Blue-Ocean-77.", "Blue-Ocean-77"),
    ("her passphrase is 'purple monkey dishwasher 42'", "purple monkey dishwasher 42"),
    ("the guest wifi password is correct-horse-battery-staple", "correct-horse-battery-staple"),
    ("my password is 12345678, I know", "12345678"),
    ("the alarm passcode is 24681357", "24681357"),
    ("Tr0ub4dor&3 is my password.", "Tr0ub4dor&3"),
    ("hunter22 is my password, don't tell", "hunter22"),
    ("log in with password Zq8#vLm2Xp and change it", "Zq8#vLm2Xp"),
    ("wifi password for the office = Gr33nTea", "Gr33nTea"),
    ("The DB_PASSWORD is Pa55word!", "Pa55word!"),
    ("the password's now Winter2025", "Winter2025"),
    ("password for alice@example.com is Sp4rkle#Pony", "Sp4rkle#Pony"),
    ("contraseña: Gato2024!", "Gato2024!"),
]

# A PIN counts with "is", ":" or "=" and four to eight digits.
PINS = [
    ("my PIN is 4821", "4821"),
    ("PIN: 907312", "907312"),
    ("the pin code is 5530.", "5530"),
    ("card pin = 0417", "0417"),
]

# Tokens, keys and secrets named in prose; a hex value must pass the hex entropy test.
NAMED_TOKENS = [
    ("the api key is AbC123xyz789QWE456", "AbC123xyz789QWE456"),
    ("the secret key is 8f2kD9sLq0Wm3Xv7", "8f2kD9sLq0Wm3Xv7"),
    ("the license key is X7KQ-9PLM-3RTV-8WQZ", "X7KQ-9PLM-3RTV-8WQZ"),
    ("the session token is abc123DEF456ghi789", "abc123DEF456ghi789"),
    (f"the api token is {_HEX40}", _HEX40),
    (f"api token: {_HEX40}", _HEX40),
    (f"the token was {_HEX32}", _HEX32),
    (f"here's the hex api key: {_HEX32}", _HEX32),
    (f"the key is {_HEX40}", _HEX40),
    (f"vault token {_VAULT_LEGACY} for staging", _VAULT_LEGACY),
    (f"vault login {_VAULT}", _VAULT),
    (f"AWS secret access key {_AWS_SECRET}", _AWS_SECRET),
    (f"aws_secret_access_key = {_AWS_SECRET}", _AWS_SECRET),
    ("the deploy token for CI is glDeploy7Xq2Lm9Pw4Zt", "glDeploy7Xq2Lm9Pw4Zt"),
]

# Keyword assignments in config, shell and code, quoted or not.
ASSIGNMENTS = [
    ("export PGPASSWORD=s3cr3tPg && psql -h db", "s3cr3tPg"),
    ("DB_PASS=Hunter2024", "Hunter2024"),
    ("auth_key: 7d9f2b1c8e", "7d9f2b1c8e"),
    ("mytool --password=Swordfish42 --verbose", "Swordfish42"),
    ("mytool --password Swordfish42 --verbose", "Swordfish42"),
    ('{"client_secret": "9sdf8SDF7sdf", "n": 1}', "9sdf8SDF7sdf"),
    ('password := "goSecret99"', "goSecret99"),
    ('if (password == "letmein99") {', "letmein99"),
    ('if ("letmein99" == password) {', "letmein99"),
    ('std::string secret("hunter2xyz");', "hunter2xyz"),
    ("$config['password'] => 'PhpSecret1';", "PhpSecret1"),
    ('char password[25] = "cPass123";', "cPass123"),
    ('private_key "abcSecret1";', "abcSecret1"),
    ("api_key = 'AKx9-22ff-Qp01'", "AKx9-22ff-Qp01"),
    ('SECRET_KEY = "django-insecure-abc123"', "django-insecure-abc123"),
    ('password: "a b c d"', "a b c d"),
    ("smtp password = mailpass1", "mailpass1"),
    ("access_token=ya29.a0AfH6SMBx", "ya29.a0AfH6SMBx"),
    ("VAULT_TOKEN=" + _VAULT_LEGACY, _VAULT_LEGACY),
    ("db.password: Qwerty!234", "Qwerty!234"),
    ("SMTP_PASS=Mail2024", "Mail2024"),
    ("pass: S3cr3t!x", "S3cr3t!x"),
    # Offsets survive text whose lowercase is longer ("İ" lowers to two characters).
    ("İzmir office, note: password=Gr33nTea!", "Gr33nTea!"),
]

# Credentials on command lines and in URLs.
COMMANDS_AND_URLS = [
    ("postgres://app:Pl4inS3cret@db.internal:5432/app", "Pl4inS3cret"),
    ("redis://:r3disPass@cache:6379/0", "r3disPass"),
    ("git clone https://alice:ghTok3nValue99@github.com/org/repo.git", "ghTok3nValue99"),
    ("mysql -u root -p'S3cret Pass' mydb", "S3cret Pass"),
    ("mysqldump -uadmin -pDumpP4ss shop > dump.sql", "DumpP4ss"),
    ("    mysql -h db -u app -pAppP4ss99 app < schema.sql", "AppP4ss99"),
    ("sshpass -p 'Ssh!Pass42' ssh deploy@host", "Ssh!Pass42"),
    ("curl -u alice:Curl3dPass https://api.example.com/v1", "Curl3dPass"),
    ("Authorization: Bearer abcDEF1234567890xyz", "abcDEF1234567890xyz"),
]

# Provider token shapes, in a sentence.
PROVIDER_TOKENS = [
    (f"use {_GITHUB} for the mirror", _GITHUB),
    (f"the bot runs as {_SLACK} now", _SLACK),
    (f"OPENAI: {_OPENAI}", _OPENAI),
    (f"telegram bot {_TELEGRAM} is live", _TELEGRAM),
]

POSITIVE_CASES = [
    *REPORTED,
    *PROSE,
    *PINS,
    *NAMED_TOKENS,
    *ASSIGNMENTS,
    *COMMANDS_AND_URLS,
    *PROVIDER_TOKENS,
]
POSITIVE = [
    pytest.param(text, secret, id=f"{name}-{i}")
    for name, cases in [
        ("reported", REPORTED),
        ("prose", PROSE),
        ("pin", PINS),
        ("named", NAMED_TOKENS),
        ("assignment", ASSIGNMENTS),
        ("command-url", COMMANDS_AND_URLS),
        ("provider", PROVIDER_TOKENS),
    ]
    for i, (text, secret) in enumerate(cases)
]


@pytest.mark.parametrize(("text", "secret"), POSITIVE)
def test_the_secret_disappears_and_the_rest_is_kept(text: str, secret: str) -> None:
    assert text.count(secret) == 1
    assert redact(text) == text.replace(secret, REDACTED)
    assert contains_secret(text)


# Sentences about passwords that disclose none.
ABOUT_PASSWORDS = [
    "My password is long and boring.",
    "The password is in the vault.",
    "Reset your password tomorrow, the link expires tonight.",
    "I forgot my password again.",
    "Password must be at least 12 characters long.",
    "The password is 8 characters too short.",
    "Passwords are hashed with bcrypt before they are stored.",
    "The wifi password is on the fridge.",
    "Her password is the same as mine, which is bad.",
    "The password reset link is https://example.com/reset?u=42",
    "password strength: weak",
    "password_policy: strict",
    "Passwordless login is on by default.",
    "1Password is my password manager.",
    "What is your password policy for contractors?",
    "Use `--password-file /run/secrets/db` instead of a flag.",
]

# Tokens, secrets and keys as ordinary words.
ABOUT_TOKENS = [
    "The token count is 4096 and max_tokens=4096.",
    "Our token budget is 128k per day.",
    "The token expires in 3600 seconds.",
    "The token was 3 days old.",
    "Pass the token to the next step.",
    "Rotate the API key every 90 days.",
    "The API key is stored in Vault under secret/data/ci.",
    "Keep your api key secret.",
    "The primary key is user_id.",
    "The key is 42.",
    "The key change is in 3f2a9c1d4e5b6a7980112233445566778899aabb.",
    f"The cache key is {_HEX40}.",
    "The secret is out: we ship Friday.",
    "The secret to good tests is isolation.",
    "The secret ingredient is cinnamon.",
    "The secret is 42.",
    "client_secret is required for the OAuth flow.",
    "The access key id is listed in IAM.",
    "Run `gpg --list-secret-keys` to see the key id.",
    "key: value pairs are fine in the config.",
    "The Telegram bot token lives in config.yaml as telegram.token.",
    "The token is JWT-shaped.",
    "My PIN is in the drawer.",
    "The GPIO pin 13 drives the LED.",
    "The PIN pad is broken again.",
    "Ping me at 3pm.",
    "Basic auth is disabled on staging.",
    "The Authorization header is missing from the request.",
]

# Code and config that names secrets without holding one.
CODE = [
    "token = os.environ['SLACK_BOT_TOKEN']",
    "if token == expected: return True",
    "export API_KEY=$API_KEY",
    "DB_PASSWORD=${DB_PASSWORD}",
    "password: ********",
    "api_key: <your-api-key>",
    "secret=true",
    "PWD=/home/alice/projects",
    "Set max_tokens: 4096 and top_p=0.9 for the summary.",
    "request_id=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b",
    "next_token_id = tokens[-1] + 1",
    "mysql -u root -p",
    "mysql -u root -p shop",
    "ssh -p 2222 alice@host",
    "docker run -p 8080:80 nginx",
    "mkdir -p /tmp/build",
    "first_pass=done, bypass=S3cret1",
    "password = getpass()",
    'api_key=environ["OPENAI_API_KEY"]',
    'os.environ["ANTHROPIC_API_KEY"] = "your-api-key-here"',
    'export MASTER_KEY="sk-$(openssl rand -hex 32)"',
    "secrets = SecretsCollection()",
    "api_key: SecretStr | None = None",
    "input_cost_per_token: 0.0000025",
    "state=litellm-session-token:login_id",
    "[Get an API key here](https://platform.example.com/settings/api-keys).",
    "- [GCRA / Token bucket](#gcra--token-bucket)",
]

# Long ids, hashes, links, paths, versions and dates.
IDS_AND_LINKS = [
    "Commit 3f2a9c1d4e5b6a7980112233445566778899aabb fixed the refresh bug.",
    "sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "Session id 123e4567-e89b-12d3-a456-426614174000 is stuck.",
    "Ticket JIRA-1234 tracks the secret rotation.",
    "Version 2.14.3 of the token service shipped on 2024-05-01.",
    "Build 2024.05.01-rc3 is out; see CHANGELOG.md.",
    "The meeting is on 2024-05-01 at 10:30.",
    "The file is at /etc/ssl/private/key.pem on the host.",
    "See https://docs.example.com/auth/tokens#refresh for details.",
    "postgres://localhost:5432/app",
    "Clone https://alice@example.com/repo.git first.",
    "postgres://user:password@localhost:5432/app is the example in the docs.",
    "The test test_redact_is_idempotent_and_total_on_any_text passed.",
    "gateway.session.budget.SessionMemory.append_messages",
    'The payload was {"data": "aGVsbG8gd29ybGQ="} as expected.',
]

NEGATIVE_CASES = [*ABOUT_PASSWORDS, *ABOUT_TOKENS, *CODE, *IDS_AND_LINKS]
NEGATIVE = [
    pytest.param(text, id=f"{name}-{i}")
    for name, cases in [
        ("passwords", ABOUT_PASSWORDS),
        ("tokens", ABOUT_TOKENS),
        ("code", CODE),
        ("ids", IDS_AND_LINKS),
    ]
    for i, text in enumerate(cases)
]


@pytest.mark.parametrize("text", NEGATIVE)
def test_ordinary_text_is_kept(text: str) -> None:
    assert not contains_secret(text)
    assert redact(text) == text


def test_the_table_is_large_enough() -> None:
    assert len(POSITIVE) >= 60
    assert len(NEGATIVE) >= 60


def test_secrets_in_one_longer_message_are_all_redacted() -> None:
    parts = [text for text, _ in REPORTED]
    text = "\n".join(parts)
    assert redact(text) == "\n".join(t.replace(s, REDACTED) for t, s in REPORTED)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(st.sampled_from(POSITIVE_CASES), st.sampled_from(NEGATIVE_CASES).map(lambda t: (t, ""))),
        min_size=1,
        max_size=6,
    )
)
def test_cases_mixed_into_one_message_keep_their_verdicts(cases: list[tuple[str, str]]) -> None:
    """A secret is found next to ordinary lines, and ordinary lines stay intact next to secrets."""
    text = "\n".join(t for t, _ in cases)
    expected = "\n".join(t.replace(s, REDACTED) if s else t for t, s in cases)
    assert redact(text) == expected
    assert redact(expected) == expected
