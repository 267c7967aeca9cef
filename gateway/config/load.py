"""Read config.yaml: `${VAR}` / `${VAR:-default}` substitution, validation, one list of errors."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]
from pydantic import SecretStr, ValidationError

from gateway.config.model import PLATFORM_TYPES, Config

SECRET_KEYS = frozenset({"api_key", "token", "tokens", "bot_token", "app_token", "signing_secret", "password"})
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")


@dataclass(frozen=True)
class ConfigProblem:
    path: str
    value: Any
    reason: str

    def render(self) -> str:
        return f"{self.path}: {self.reason} (got {_show(self.path, self.value)})"


class ConfigError(Exception):
    def __init__(self, source: str, problems: list[ConfigProblem]) -> None:
        self.source = source
        self.problems = problems
        lines = [f"{source}: {len(problems)} problem(s):"] + [f"  - {p.render()}" for p in problems]
        super().__init__("\n".join(lines))


def _is_secret_path(path: str) -> bool:
    parts = re.split(r"[.\[\]]+", path)
    return any(p in SECRET_KEYS for p in parts if p)


def _show(path: str, value: Any) -> str:
    if value is _MISSING:
        return "nothing"
    if isinstance(value, str) and _VAR.fullmatch(value):
        return value  # an unresolved placeholder names a variable, not a secret
    if isinstance(value, SecretStr) or (_is_secret_path(path) and value not in (None, "")):
        return "'****'"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


_MISSING = object()


def default_config_path() -> Path:
    return Path(os.environ.get("CLAWGATE_CONFIG", "config.yaml"))


def _substitute(node: Any, path: str, env: Mapping[str, str], problems: list[ConfigProblem]) -> Any:
    if isinstance(node, dict):
        return {k: _substitute(v, _join(path, str(k)), env, problems) for k, v in node.items()}
    if isinstance(node, list):
        return [_substitute(v, f"{path}[{i}]", env, problems) for i, v in enumerate(node)]
    if not isinstance(node, str) or "${" not in node:
        return node

    def repl(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        if name in env and (env[name] != "" or default is None):
            return env[name]
        if default is not None:
            return default
        problems.append(ConfigProblem(path, f"${{{name}}}", f"environment variable {name} is not set"))
        return ""

    out = _VAR.sub(repl, node)
    # A whole-value substitution that yields "" means "unset": let the field default apply.
    if out == "" and _VAR.fullmatch(node):
        return None
    return out


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _fill_channel_types(data: dict[str, Any]) -> None:
    channels = data.get("channels")
    if not isinstance(channels, dict):
        return
    for name, ch in channels.items():
        if ch is None:
            channels[name] = ch = {}
        if isinstance(ch, dict) and "type" not in ch and name in PLATFORM_TYPES:
            ch["type"] = name


def _drop_nones(node: Any) -> Any:
    """Keys and list items whose value is null (or an empty `${VAR:-}`) are left out: defaults apply."""
    if isinstance(node, dict):
        return {k: _drop_nones(v) for k, v in node.items() if v is not None}
    if isinstance(node, list):
        return [_drop_nones(v) for v in node if v is not None]
    return node


def _loc_to_path(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in PLATFORM_TYPES and path.startswith("channels.") and path.count(".") == 1:
            continue  # pydantic's union tag, not a user-visible key
        else:
            path = _join(path, str(part))
    return path or "(root)"


def parse_config(data: Any, source: str = "config", env: Mapping[str, str] | None = None) -> Config:
    env = os.environ if env is None else env
    problems: list[ConfigProblem] = []
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(source, [ConfigProblem("(root)", type(data).__name__, "the file must hold a mapping")])
    data = _substitute(data, "", env, problems)
    _fill_channel_types(data)
    data = _drop_nones(data)
    config: Config | None = None
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            path = _loc_to_path(tuple(err["loc"]))
            value = err.get("input", _MISSING) if err["type"] != "missing" else _MISSING
            reason = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
            reason = reason.removeprefix("Value error, ")
            problems.append(ConfigProblem(path, value, reason))
    if config is not None:
        problems.extend(ConfigProblem(p, v, r) for p, v, r in config.check_semantics())
    if problems or config is None:
        raise ConfigError(source, problems)
    return config


def load_config(path: Path | str | None = None, env: Mapping[str, str] | None = None) -> Config:
    path = Path(path) if path else default_config_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(str(path), [ConfigProblem("(file)", str(path), "file not found")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), [ConfigProblem("(file)", str(path), f"cannot read: {exc}")]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(file)"
        reason = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(str(path), [ConfigProblem(where, "YAML", f"invalid YAML: {reason}")]) from None
    return parse_config(data, str(path), env)


def secret_values(config: Config) -> list[str]:
    """Every secret in the config, for the log redaction filter."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, SecretStr):
            v = node.get_secret_value()
            if v:
                found.append(v)
        elif isinstance(node, dict):
            for v in node.values():
                walk(v)
        elif isinstance(node, (list, tuple)):
            for v in node:
                walk(v)
        elif hasattr(node, "__pydantic_fields__"):
            for name in type(node).model_fields:
                walk(getattr(node, name))

    walk(config)
    return found
