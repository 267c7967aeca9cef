"""Read config.yaml: `${VAR}` / `${VAR:-default}` substitution, validation, one list of errors,
each in plain words (not pydantic's own texts) with its path."""

from __future__ import annotations

import difflib
import logging
import os
import re
import stat
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]
from pydantic import BaseModel, SecretStr, ValidationError
from pydantic_core import ErrorDetails

from gateway.config.model import PLATFORM_TYPES, Config
from gateway.core.logs import event

log = logging.getLogger("clawgate.config")
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
    if isinstance(value, dict):
        # Its keys only: a section's values may be secrets (a channel without a type, its token).
        text = "a section with the keys " + ", ".join(map(str, value)) if value else "an empty section"
        return text if len(text) <= 80 else text[:77] + "..."
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
        elif part == "[key]":
            continue  # the mapping key itself is wrong: the reason says "the name ..."
        else:
            path = _join(path, str(part))
    return path or "(root)"


# -- pydantic's errors in plain words ------------------------------------------------------------

_TYPE_WORDS = {
    "string_type": "must be text",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number, without a fraction",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "list_type": "must be a list (lines starting with '- ')",
    "tuple_type": "must be a list (lines starting with '- ')",
    "set_type": "must be a list (lines starting with '- ')",
    "dict_type": "must be a mapping (indented 'key: value' lines)",
    "model_type": "must be a section of keys (indented 'key: value' lines), not a single value",
    "model_attributes_type": "must be a section of keys (indented 'key: value' lines), not a single value",
    "missing": "is required",
}
_BOUNDS = {
    "greater_than": ("gt", "must be greater than {}"),
    "greater_than_equal": ("ge", "must be {} or more"),
    "less_than": ("lt", "must be less than {}"),
    "less_than_equal": ("le", "must be {} or less"),
}


def _number(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _did_you_mean(word: Any, choices: list[str]) -> str:
    if not isinstance(word, str) or not choices:
        return ""
    folded = {c.lower(): c for c in choices}
    if word.lower() in folded:
        return f"; did you mean {folded[word.lower()]!r}?"
    close = difflib.get_close_matches(word.lower(), list(folded), n=1, cutoff=0.6)
    return f"; did you mean {folded[close[0]]!r}?" if close else ""


def _flat_types(tp: Any) -> list[Any]:
    """`tp` without Annotated, Optional and unions: the types a value there may be."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _flat_types(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        return [t for arg in typing.get_args(tp) for t in _flat_types(arg) if t is not type(None)]
    return [tp]


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _step(tp: Any, part: Any) -> Any:
    """The type found at `part` (a key, an index, a union tag) inside a value of type `tp`."""
    candidates = _flat_types(tp)
    if isinstance(part, int):
        return next((typing.get_args(c)[0] for c in candidates if typing.get_origin(c) in (list, tuple, set)), None)
    for c in candidates:
        if _is_model(c) and part in c.model_fields:
            return c.model_fields[part].annotation
    for c in candidates:
        if typing.get_origin(c) is dict:
            return typing.get_args(c)[1]
    for c in candidates:  # a discriminated union names the member by its `type`
        if _is_model(c) and "type" in c.model_fields and part in typing.get_args(c.model_fields["type"].annotation):
            return c
    return None


def _holds_secret(loc: tuple[Any, ...]) -> bool:
    """Is the value at `loc` a secret by its type (SecretStr), whatever its key is called?"""
    tp: Any = Config
    for part in loc:
        tp = None if part == "[key]" else _step(tp, part)
        if tp is None:
            return False
    for c in _flat_types(tp):
        if c is SecretStr or (typing.get_origin(c) is list and SecretStr in _flat_types(typing.get_args(c)[0])):
            return True
    return False


def _known_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys allowed where the last part of `loc` sits."""
    tp: Any = Config
    for part in loc[:-1]:
        tp = _step(tp, part)
        if tp is None:
            return []
    return [key for c in _flat_types(tp) if _is_model(c) for key in c.model_fields]


def _describe_pattern(pattern: str) -> str:
    # The names in this config are `^[<characters>]+$`: say which characters.
    m = re.fullmatch(r"\^\[([^\]]+)\]\+\$", pattern)
    if m is None:
        return f"does not have the expected form (the pattern {pattern})"
    chars, kinds = m.group(1), []
    for span, word in (("A-Za-z", "letters"), ("A-Z", "capital letters"), ("a-z", "small letters"), ("0-9", "digits")):
        if span in chars:
            kinds.append(word)
            chars = chars.replace(span, "")
    kinds += [repr(c) for c in chars.replace("\\", "")]
    return "may hold only " + ", ".join(kinds[:-1]) + (" and " if len(kinds) > 1 else "") + kinds[-1]


def _length_words(err: ErrorDetails, at: str, bound: int) -> str:
    value = err.get("input")
    unit = "character" if err["type"].startswith("string") or isinstance(value, (str, SecretStr)) else "item"
    return f"must have {at} {bound} {unit}{'' if bound == 1 else 's'}"


def _channel_types(tag: Any) -> str:
    return "the known types are " + ", ".join(PLATFORM_TYPES) + _did_you_mean(tag, list(PLATFORM_TYPES))


def plain_reason(err: ErrorDetails) -> str:
    """What one pydantic error means, in words a person editing config.yaml reads at once."""
    kind, ctx, loc = err["type"], err.get("ctx") or {}, tuple(err["loc"])
    name = "the name " if loc and loc[-1] == "[key]" else ""
    if kind == "extra_forbidden":
        return "unknown key" + _did_you_mean(loc[-1] if loc else None, _known_keys(loc))
    if kind == "union_tag_invalid":
        return "unknown channel type; " + _channel_types(ctx.get("tag"))
    if kind == "union_tag_not_found":
        return "a channel needs a type (unless it is named after its platform); " + _channel_types(None)
    if kind in _TYPE_WORDS:
        return name + _TYPE_WORDS[kind]
    if kind in _BOUNDS:
        key, words = _BOUNDS[kind]
        return name + words.format(_number(ctx.get(key)))
    if kind in ("too_short", "string_too_short"):
        return name + _length_words(err, "at least", int(ctx.get("min_length", 0)))
    if kind in ("too_long", "string_too_long"):
        return name + _length_words(err, "at most", int(ctx.get("max_length", 0)))
    if kind == "string_pattern_mismatch":
        return name + _describe_pattern(str(ctx.get("pattern", "")))
    if kind in ("literal_error", "enum"):
        choices = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        return f"{name}must be one of {ctx.get('expected')}" + _did_you_mean(err.get("input"), choices)
    return name + err["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")


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
            if err["type"] == "union_tag_invalid":  # the channel's `type` is what is wrong
                path, value = f"{path}.type", (err.get("ctx") or {}).get("tag")
            if value is not _MISSING and _holds_secret(tuple(err["loc"])):
                value = SecretStr(str(value))  # shown as '****' (a webhook secret is not named like a token)
            problems.append(ConfigProblem(path, value, plain_reason(err)))
    if config is not None:
        problems.extend(ConfigProblem(p, v, r) for p, v, r in config.check_semantics())
    if problems or config is None:
        raise ConfigError(source, problems)
    return config


# Variables this process took from a .env file, with their values: a later read of the file (a
# reload) may change them, while a variable the real environment set is never replaced.
_FROM_ENV_FILE: dict[str, str] = {}
_WARNED: set[Path] = set()


def env_file_of(config_path: Path) -> Path:
    """The .env file that goes with a config file: beside it (`clawgate onboard` writes both)."""
    return config_path.parent / ".env"


def load_env_file(config_path: Path) -> Path | None:
    """Put the variables of the .env beside `config_path` into this process's environment, never
    over one the real environment set (that one wins, as with docker/systemd's own env files).
    Returns the file read, or None when there is none. A file that others may read is warned of:
    it holds the secrets."""
    from dotenv import dotenv_values

    path = env_file_of(config_path)
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    if not stat.S_ISREG(mode):
        return None
    if mode & 0o077 and path not in _WARNED:
        _WARNED.add(path)
        event(
            log,
            "env_file_readable_by_others",
            logging.WARNING,
            path=str(path),
            mode=oct(stat.S_IMODE(mode)),
            hint=f"chmod 600 {path}",
        )
    for name, value in dotenv_values(path, interpolate=False).items():  # a secret's "$" is literal
        if value is None:
            continue
        if name in os.environ and _FROM_ENV_FILE.get(name) != os.environ[name]:
            continue  # set by the real environment
        os.environ[name] = _FROM_ENV_FILE[name] = value
    return path


def load_config(path: Path | str | None = None, env: Mapping[str, str] | None = None) -> Config:
    """The config at `path`. Without an explicit `env`, the process's environment, after the .env
    file beside `path` (if any) was added to it (load_env_file)."""
    path = Path(path) if path else default_config_path()
    if env is None:
        load_env_file(path)
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
