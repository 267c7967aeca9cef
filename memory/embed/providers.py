"""Which LiteLLM route an embedding provider means, and whose key and address it uses (DESIGN §7).

`memory.search.provider` is `local`, one of the providers with a usual model (`openai`, `gemini`,
`ollama`), or `litellm` with any `provider/model` LiteLLM knows as `memory.search.model`
(`cohere/embed-multilingual-v3.0`, `hosted_vllm/intfloat/multilingual-e5-small`, …).

A remote provider's key and address are its own (`memory.search.api_key`, `.api_base`); unset, they
are taken from `ai:` when the chat model is of the same provider: `ai.api_base` (an OpenAI-compatible
server, an Ollama host), and `ai.api_key` (or `ai.gemini.api_key` for gemini) when the embeddings go
to that same address. A key is never sent to an address it was not configured for. What is still
missing then is looked up in the environment by LiteLLM (OPENAI_API_KEY, …); without it the
embedder refuses to load and says which setting fixes it (LiteLLMEmbedder.missing_keys).

Pure: no LiteLLM import here (seconds)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

LITELLM = "litellm"
PROVIDERS = ("local", "openai", "gemini", "ollama", LITELLM)
# The model each named provider uses when `memory.search.model` is empty.
DEFAULT_MODELS = {
    "openai": "text-embedding-3-small",
    "gemini": "text-embedding-004",
    "ollama": "nomic-embed-text",
}
# Bare model names LiteLLM sends to OpenAI (a chat model named without its provider).
_OPENAI_BARE = re.compile(r"^(gpt-|chatgpt-|o\d|text-embedding-|ft:gpt)")


def litellm_route(provider: str, model: str | None) -> str:
    """`provider/model` as LiteLLM routes it; a model already naming its provider is kept. ValueError
    for `litellm` without a `provider/model`, or a provider this does not know."""
    if provider == LITELLM:
        if not model or "/" not in model.strip("/"):
            raise ValueError(
                f"memory.search.model {model!r}: the litellm provider needs a LiteLLM route, provider/model "
                "(e.g. cohere/embed-multilingual-v3.0)"
            )
        return model
    if provider not in DEFAULT_MODELS:
        raise ValueError(f"unknown memory.search.provider {provider!r}: one of {', '.join(PROVIDERS)}, or empty")
    name = model or DEFAULT_MODELS[provider]
    return name if name.startswith(provider + "/") else f"{provider}/{name}"


def route_provider(route: str) -> str:
    """The LiteLLM provider of a `provider/model` route."""
    return route.split("/", 1)[0]


def chat_provider(model: str | None) -> str | None:
    """The LiteLLM provider of the chat model `ai.model` names, when it can be told without LiteLLM."""
    if not model:
        return None
    if "/" in model:
        return route_provider(model)
    return "openai" if _OPENAI_BARE.match(model) else None


@dataclass(frozen=True, slots=True)
class Credentials:
    """The key and address an embedding route uses, and the setting each came from (for logs and
    `clawgate doctor`; None: LiteLLM's own default, from the environment)."""

    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)
    base_from: str | None = None
    key_from: str | None = None


def resolve_credentials(
    route: str,
    *,
    api_base: str | None = None,
    api_key: str | None = None,
    ai_model: str | None = None,
    ai_api_base: str | None = None,
    ai_api_key: str | None = None,
    gemini_api_key: str | None = None,
) -> Credentials:
    """memory.search's own key and address, else `ai:`'s where they are meant for the same provider
    and address (see the module's doc)."""
    provider = route_provider(route)
    same = chat_provider(ai_model) == provider
    base, base_from = (api_base, "memory.search.api_base") if api_base else (None, None)
    if base is None and same and ai_api_base:
        base, base_from = ai_api_base, "ai.api_base"
    if api_key:
        return Credentials(base, api_key, base_from, "memory.search.api_key")
    if provider == "gemini" and gemini_api_key and base is None:
        return Credentials(base, gemini_api_key, base_from, "ai.gemini.api_key")
    # ai.api_key goes where the chat model's requests go: its address, or both the provider's default.
    if same and ai_api_key and base == (ai_api_base or None):
        return Credentials(base, ai_api_key, base_from, "ai.api_key")
    return Credentials(base, None, base_from, None)


def key_fix(provider: str, variables: list[str]) -> str:
    """What to set when no key was found for `provider` (`variables`: what LiteLLM looked for)."""
    where = f" or {' / '.join(variables)} in the environment" if variables else ""
    also = "ai.gemini.api_key, " if provider == "gemini" else ""
    return (
        f"set memory.search.api_key, or {also}ai.api_key with a {provider}/ ai.model{where} "
        "(any value for a server that needs none)"
    )
