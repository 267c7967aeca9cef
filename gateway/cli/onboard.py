"""`clawgate onboard` (docs/onboarding.md): ask a newcomer for the model, the channels and their
credentials, then write a commented config.yaml and a .env holding the secrets, check the config
loads, and run the doctor on it.

Secrets live only in the .env (created 0600); config.yaml names them as ${VARIABLE}s, so it can be
shown, shared and committed. Neither file is replaced without --force."""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import os
import re
import secrets
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

CHANNELS = ("telegram", "discord", "slack", "teams", "messenger")
DEFAULT_MODEL = "openai/gpt-4o-mini"
DEFAULT_LOCAL_BASE = "http://localhost:11434"
LOCAL_PREFIXES = ("ollama/", "ollama_chat/")
TOKEN_VARIABLE = "CLAWGATE_TOKEN"
API_KEY_VARIABLE = "CLAWGATE_API_KEY"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Credential:
    """One value a channel's config needs: its key there, the flag and the .env variable that give it
    (secrets only: a plain value is written into config.yaml itself), and what to ask."""

    key: str
    flag: str
    question: str
    variable: str | None = None  # set: a secret, kept in the .env
    optional: bool = False
    generate: bool = False  # a secret the gateway and the platform merely share: made up when not given


CREDENTIALS: dict[str, tuple[Credential, ...]] = {
    "telegram": (Credential("token", "--telegram-token", "Telegram bot token (@BotFather)", "TELEGRAM_BOT_TOKEN"),),
    "discord": (Credential("token", "--discord-token", "Discord bot token", "DISCORD_BOT_TOKEN"),),
    "slack": (Credential("bot_token", "--slack-bot-token", "Slack bot token (xoxb-...)", "SLACK_BOT_TOKEN"),),
    "teams": (
        Credential("app_id", "--teams-app-id", "Teams bot's Microsoft App ID"),
        Credential("app_password", "--teams-app-password", "Teams bot's client secret", "TEAMS_APP_PASSWORD"),
        Credential("tenant_id", "--teams-tenant-id", "Entra ID tenant (empty: multi-tenant bot)", optional=True),
    ),
    "messenger": (
        Credential("page_access_token", "--messenger-page-token", "Page access token", "MESSENGER_PAGE_ACCESS_TOKEN"),
        Credential("app_secret", "--messenger-app-secret", "Meta app secret", "MESSENGER_APP_SECRET"),
        Credential(
            "verify_token",
            "--messenger-verify-token",
            "Webhook verify token (empty: make one up)",
            "MESSENGER_VERIFY_TOKEN",
            generate=True,
        ),
    ),
}
# By mode: Telegram polls, or Telegram calls a webhook; Slack's Socket Mode, or its HTTP Events API.
SLACK_MODES = {
    "socket": Credential("app_token", "--slack-app-token", "Slack app-level token (xapp-...)", "SLACK_APP_TOKEN"),
    "http": Credential("signing_secret", "--slack-signing-secret", "Slack signing secret", "SLACK_SIGNING_SECRET"),
}
TELEGRAM_WEBHOOK_SECRET = Credential(
    "webhook_secret", "--telegram-webhook-secret", "", "TELEGRAM_WEBHOOK_SECRET", generate=True
)
DOCS = {
    "telegram": "docs/platforms/telegram.md",
    "discord": "docs/platforms/discord.md",
    "slack": "docs/platforms/slack.md",
    "teams": "docs/teams.md",
    "messenger": "docs/messenger.md",
}


class OnboardError(Exception):
    """What stops onboarding, in words, with the exit code it means."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Answers:
    model: str = DEFAULT_MODEL
    api_key: str | None = None  # the key itself: kept in the .env
    api_key_env: str | None = None  # or a variable the environment already holds it in
    api_base: str | None = None
    channels: list[str] = field(default_factory=list)
    telegram_mode: str = "polling"
    slack_mode: str = "socket"
    public_url: str | None = None
    values: dict[str, dict[str, str]] = field(default_factory=dict)  # channel -> key -> value

    def credentials(self, channel: str) -> tuple[Credential, ...]:
        extra: tuple[Credential, ...] = ()
        if channel == "slack":
            extra = (SLACK_MODES[self.slack_mode],)
        elif channel == "telegram" and self.telegram_mode == "webhook":
            extra = (TELEGRAM_WEBHOOK_SECRET,)
        return CREDENTIALS[channel] + extra

    def needs_public_url(self) -> bool:
        """Does a chosen channel have its platform call this server (a webhook)?"""
        chosen = set(self.channels)
        return bool(
            chosen & {"teams", "messenger"}
            or ("telegram" in chosen and self.telegram_mode == "webhook")
            or ("slack" in chosen and self.slack_mode == "http")
        )


# -- the command line -------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="clawgate onboard",
        description="Asks for the model, the channels and their credentials (or takes them as flags with "
        "--non-interactive; a secret flag left out is read from the variable of the same name, e.g. "
        "TELEGRAM_BOT_TOKEN). Writes config.yaml (secrets as ${VARIABLE}s) and .env (the secrets and a new "
        "CLAWGATE_TOKEN, mode 0600) and runs the doctor. Never replaces either file without --force. "
        "Exit 2: values missing; 1: a file exists or the config does not load.",
    )
    p.add_argument("--config", type=Path, default=None, help="the config to write (default: ./config.yaml)")
    p.add_argument("--non-interactive", action="store_true", help="ask nothing: every value comes from flags")
    p.add_argument("--env-file", type=Path, default=None, help="where the secrets go (default: .env beside config)")
    p.add_argument("--force", action="store_true", help="replace an existing config.yaml and .env")
    p.add_argument("--model", default=None, help=f"a LiteLLM model id (default: {DEFAULT_MODEL}; ollama/... is local)")
    p.add_argument("--api-key", default=None, help="the model's API key (kept in .env; default: $CLAWGATE_API_KEY)")
    p.add_argument("--api-key-env", default=None, metavar="VARIABLE", help="the variable already holding the key")
    p.add_argument("--api-base", default=None, help="the model server's URL (Ollama, vLLM, a proxy)")
    p.add_argument("--channel", action="append", choices=CHANNELS, default=[], help="a channel to set up (repeatable)")
    p.add_argument("--telegram-mode", choices=("polling", "webhook"), default="polling")
    p.add_argument("--slack-mode", choices=("socket", "http"), default="socket")
    flags = {c.flag: c for creds in (*CREDENTIALS.values(), tuple(SLACK_MODES.values())) for c in creds}
    flags[TELEGRAM_WEBHOOK_SECRET.flag] = TELEGRAM_WEBHOOK_SECRET
    for flag, cred in flags.items():
        p.add_argument(flag, default=None, help=f"default: ${cred.variable}" if cred.variable else None)
    p.add_argument("--public-url", default=None, help="the https address platforms call (webhook channels)")
    p.add_argument("--offline", action="store_true", help="the doctor asks no platform and no model")
    p.add_argument("--no-doctor", action="store_true", help="do not run the doctor at the end")
    return p


def main(argv: list[str], config_path: Path) -> int:
    """`clawgate onboard ARGS`: its flags are read here, so that this module is imported only when
    it runs; `config_path`: where `--config` before the subcommand (or $CLAWGATE_CONFIG) points."""
    args = parser().parse_args(argv)
    return run(args, args.config if args.config is not None else config_path)


def run(
    args: argparse.Namespace,
    config_path: Path,
    *,
    ask: Callable[[str], str] = input,
    ask_secret: Callable[[str], str] = getpass.getpass,
    interactive: bool | None = None,
) -> int:
    """The command; `ask`/`ask_secret` read an answer (tests give their own), `interactive`: ask at
    all (default: unless --non-interactive, or standard input is no terminal)."""
    env_path = args.env_file if args.env_file is not None else config_path.parent / ".env"
    if interactive is None:
        interactive = not args.non_interactive and sys.stdin.isatty()
    try:
        refuse_overwrite([config_path, env_path], args.force)
        answers = Questions(ask, ask_secret).answers() if interactive else from_flags(args, os.environ)
        config_text, env_values = render(answers)
        check_loads(config_text, env_values, config_path)
        write_env(env_path, env_values)
        write_config(config_path, config_text)
    except OnboardError as exc:
        print(f"clawgate onboard: {exc}", file=sys.stderr)
        return exc.code
    print(f"wrote {config_path} (no secrets: they are ${{VARIABLES}}) and {env_path} (the secrets, mode 0600)")
    if env_path.resolve() != (config_path.parent / ".env").resolve():
        beside = config_path.parent / ".env"
        print(f"note: the gateway reads only {beside}: export what {env_path} holds before it starts")
    if not args.no_doctor:
        from gateway.doctor import report as doctor

        print("\nclawgate doctor:")
        doctor.main(config_path, offline=args.offline)
    print("\n".join(next_steps(answers, config_path)))
    return 0


def refuse_overwrite(paths: list[Path], force: bool) -> None:
    for path in paths:
        if path.exists() and not force:
            raise OnboardError(f"{path} exists already: nothing was written; run again with --force to replace it", 1)


def from_flags(args: argparse.Namespace, env: Mapping[str, str]) -> Answers:
    """The answers as flags (and, for a secret flag left out, its variable) give them; every value
    missing is named at once."""
    a = Answers(model=args.model or DEFAULT_MODEL, api_base=args.api_base or None)
    a.api_key = args.api_key or env.get(API_KEY_VARIABLE) or None
    a.api_key_env = args.api_key_env or None
    if a.api_key_env is not None and not _NAME.match(a.api_key_env):
        raise OnboardError(f"--api-key-env must be a variable name, such as OPENAI_API_KEY (got {a.api_key_env!r})", 2)
    if a.model.startswith(LOCAL_PREFIXES) and a.api_base is None:
        a.api_base = DEFAULT_LOCAL_BASE
    a.channels = list(dict.fromkeys(args.channel))
    a.telegram_mode, a.slack_mode = args.telegram_mode, args.slack_mode
    a.public_url = args.public_url or None
    missing = []
    for channel in a.channels:
        got = a.values.setdefault(channel, {})
        for cred in a.credentials(channel):
            value = getattr(args, cred.flag[2:].replace("-", "_"))
            value = value or (env.get(cred.variable) if cred.variable else None)
            if value:
                got[cred.key] = value
            elif cred.generate:
                got[cred.key] = secrets.token_urlsafe(24)
            elif not cred.optional:
                from_env = f", or ${cred.variable}" if cred.variable else ""
                missing.append(f"{cred.flag} (channel {channel}{from_env})")
    if a.needs_public_url() and not a.public_url:
        missing.append("--public-url (the https address the platforms of webhook channels call)")
    if missing:
        listed = "\n".join(f"  {m}" for m in missing)
        raise OnboardError(f"missing values (with --non-interactive, or no terminal, nothing is asked):\n{listed}", 2)
    return a


class Questions:
    """The interactive questions, one at a time, each with its default in brackets."""

    def __init__(self, ask: Callable[[str], str], ask_secret: Callable[[str], str]) -> None:
        self._ask = ask
        self._secret = ask_secret

    def ask(self, question: str, default: str = "", choices: tuple[str, ...] = ()) -> str:
        shown = f" [{default}]" if default else ""
        while True:
            answer = self._ask(f"{question}{shown}: ").strip() or default
            if not choices or answer in choices:
                return answer
            print(f"  please answer one of: {', '.join(choices)}")

    def secret(self, question: str, *, required: bool = True) -> str:
        while True:
            answer = self._secret(f"{question} (hidden): ").strip()
            if answer or not required:
                return answer
            print("  this one is needed (Ctrl+C stops)")

    def answers(self) -> Answers:
        a = Answers()
        print("clawgate onboard: a few questions, then config.yaml and .env are written (Ctrl+C stops).")
        a.model = self.ask("Model (a LiteLLM id; ollama/<name> for a local one)", DEFAULT_MODEL)
        if a.model.startswith(LOCAL_PREFIXES):
            a.api_base = self.ask("Ollama's address", DEFAULT_LOCAL_BASE)
        else:
            a.api_key = self.secret("API key (empty: the provider's own variable, e.g. OPENAI_API_KEY)", required=False)
            a.api_key = a.api_key or None
        a.channels = self._channels()
        for channel in a.channels:
            if channel == "telegram":
                a.telegram_mode = self.ask("Telegram: polling or webhook", "polling", ("polling", "webhook"))
            if channel == "slack":
                a.slack_mode = self.ask("Slack: socket (Socket Mode) or http (Events)", "socket", tuple(SLACK_MODES))
            got = a.values.setdefault(channel, {})
            for cred in a.credentials(channel):
                if cred.generate:
                    got[cred.key] = secrets.token_urlsafe(24)
                elif cred.variable:
                    got[cred.key] = self.secret(cred.question)
                elif value := self.ask(cred.question):
                    got[cred.key] = value
        if a.needs_public_url():
            a.public_url = self.ask("The https address platforms call this gateway at")
            while not a.public_url:
                print("  a webhook channel needs it")
                a.public_url = self.ask("The https address platforms call this gateway at")
        return a

    def _channels(self) -> list[str]:
        while True:
            text = self.ask(f"Channels besides the web chat ({', '.join(CHANNELS)}; comma-separated, empty: none)")
            chosen = [c.strip().lower() for c in text.split(",") if c.strip()]
            unknown = [c for c in chosen if c not in CHANNELS]
            if not unknown:
                return list(dict.fromkeys(chosen))
            print(f"  not a channel: {', '.join(unknown)}")


# -- the files ----------------------------------------------------------------------------------------


def _q(value: str) -> str:
    """A plain value as a YAML scalar (a JSON string is one), whatever characters it has."""
    return json.dumps(value)


def render(a: Answers) -> tuple[str, dict[str, str]]:
    """config.yaml's text and the .env's variables for `a`: every secret a ${VARIABLE} there."""
    env: dict[str, str] = {}
    lines = [
        "# clawgate configuration, written by `clawgate onboard`. Every key: docs/configuration.md.",
        "# Secrets are ${VARIABLES}: they live in .env beside this file (mode 0600), which the gateway reads",
        "# at start; a variable set in the real environment wins over the file. Check: clawgate config check",
        "",
        "ai:",
        "  # The model answering (a LiteLLM id); docs/getting-started.md lists others.",
        f"  model: {_q(a.model)}",
    ]
    if a.api_key_env:
        lines.append(f"  api_key: ${{{a.api_key_env}}}")
    elif a.api_key:
        env[API_KEY_VARIABLE] = a.api_key
        lines.append(f"  api_key: ${{{API_KEY_VARIABLE}}}")
    else:
        lines.append("  # no api_key: LiteLLM reads the provider's own variable (OPENAI_API_KEY, ...)")
    if a.api_base:
        lines.append(f"  api_base: {_q(a.api_base)}  # the model server (Ollama, vLLM, a proxy)")
    lines += [
        "",
        "agents:",
        "  list:",
        "    - name: default",
        "      instructions: |",
        "        You are clawgate, a helpful assistant reached through a chat gateway.",
        "        Answer clearly and concisely.",
        "",
        "storage:",
        "  data_dir: ./data  # the database and the memory files (docs/operations.md: backups)",
        "",
        "memory:",
        "  search:",
        "    provider: local  # recall's embeddings: the bundled model, no network (docs/memory.md)",
        "",
        "channels:",
        "  # The chat page and the console (docs/platforms/web.md, docs/console.md), on this machine only.",
        "  web:",
        "    host: ${CLAWGATE_HOST:-127.0.0.1}",
        "    port: ${CLAWGATE_PORT:-8080}",
    ]
    if a.public_url:
        lines.append(f"    public_url: {_q(a.public_url)}  # where a TLS proxy publishes this server")
    for channel in a.channels:
        lines += ["", f"  # {channel.capitalize()}: {DOCS[channel]}. Unknown people get a pairing code (dm_policy)."]
        lines.append(f"  {channel}:")
        if channel == "telegram" and a.telegram_mode == "webhook":
            assert a.public_url is not None
            lines += ["    mode: webhook", f"    webhook_url: {_q(a.public_url.rstrip('/') + '/telegram/telegram')}"]
        if channel == "slack" and a.slack_mode == "http":
            lines.append("    mode: http  # Slack posts events to /slack/events")
        for cred in a.credentials(channel):
            value = a.values.get(channel, {}).get(cred.key)
            if value is None:
                continue
            if cred.variable is None:
                lines.append(f"    {cred.key}: {_q(value)}")
            else:
                env[cred.variable] = value
                lines.append(f"    {cred.key}: ${{{cred.variable}}}")
    env[TOKEN_VARIABLE] = secrets.token_urlsafe(32)
    lines += [
        "",
        "users:",
        "  # You: the admin. The chat page on this machine answers as you; the console and the APIs take",
        f"  # the token in .env ({TOKEN_VARIABLE}). Others: pairing codes, or more users here (docs/security.md).",
        "  local:",
        "    roles: [admin]",
        '    identities: ["web:local"]',
        f'    tokens: ["${{{TOKEN_VARIABLE}}}"]',
        "",
    ]
    return "\n".join(lines), env


def check_loads(config_text: str, env_values: Mapping[str, str], config_path: Path) -> None:
    """Load `config_text` as the gateway would, with the .env's values beneath the real environment:
    a config that would not start is never written."""
    import yaml  # type: ignore[import-untyped]

    from gateway.config.load import ConfigError, parse_config

    try:
        parse_config(yaml.safe_load(config_text), str(config_path), {**env_values, **os.environ})
    except ConfigError as exc:
        raise OnboardError(f"the config would not load, so nothing was written:\n{exc}", 1) from None


def _env_line(name: str, value: str) -> str:
    if "\n" in value or "\r" in value:
        raise OnboardError(f"the value for {name} has a line break: a secret is one line", 2)
    # Double quotes with \\ and \" escaped: python-dotenv reads them back, and reads ours without
    # ${VAR} expansion (gateway/config/load.py), so any secret comes back exactly as it was typed.
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'{name}="{escaped}"'


def write_env(path: Path, values: Mapping[str, str]) -> None:
    """The .env, created with mode 0600 (never wider, not even for a moment) and then moved in place."""
    text = "# Secrets for config.yaml (written by clawgate onboard). Keep this file private.\n"
    text += "".join(_env_line(name, value) + "\n" for name, value in values.items())
    _replace(path, text, 0o600)


def write_config(path: Path, text: str) -> None:
    _replace(path, text, 0o644)


def _replace(path: Path, text: str, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


def next_steps(a: Answers, config_path: Path) -> list[str]:
    """What to do next, in plain words; never a secret."""
    at_root = config_path.resolve() == Path("config.yaml").resolve()
    run = "make run" if at_root else f"clawgate --config {config_path} run"
    steps = [
        "",
        "Next:",
        f"  1. start it: {run}",
        "  2. chat at http://127.0.0.1:8080 (on this machine no sign-in is needed)",
        f"  3. the console, http://127.0.0.1:8080/console: sign in with the {TOKEN_VARIABLE} value from .env",
    ]
    if "telegram" in a.channels:
        steps.append("  4. Telegram: write to your bot (t.me/<its name>; the doctor's telegram line names it)")
    if a.channels:
        steps.append("  New people on a chat platform get a pairing code: `clawgate pairing approve CODE` admits them.")
    return steps
