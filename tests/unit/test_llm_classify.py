from __future__ import annotations

import httpx
import litellm
import pytest

from gateway.llm.client import Attempt, LLMError, classify


def _resp(status: int) -> httpx.Response:
    return httpx.Response(status, request=httpx.Request("POST", "http://x"))


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (litellm.RateLimitError("slow down", "openai", "m", response=_resp(429)), "rate_limit"),
        (litellm.AuthenticationError("nope", "openai", "m", response=_resp(401)), "auth"),
        (litellm.NotFoundError("gone", "m", "openai", response=_resp(404)), "not_found"),
        (litellm.InternalServerError("boom", "openai", "m", response=_resp(500)), "server"),
        (litellm.ServiceUnavailableError("busy", "openai", "m", response=_resp(503)), "overloaded"),
        (litellm.Timeout("late", "m", "openai"), "timeout"),
        (litellm.APIConnectionError("down", "openai", "m"), "connection"),
        (litellm.ContextWindowExceededError("long", "m", "openai", response=_resp(400)), "context_window"),
        (TimeoutError(), "timeout"),
        (ValueError("x"), "other"),
    ],
)
def test_classify_by_type(exc: BaseException, kind: str) -> None:
    assert classify(exc)[0] == kind


def test_missing_credentials_are_told_apart_from_server_errors() -> None:
    import openai

    try:
        try:
            raise openai.OpenAIError("Missing credentials")
        except openai.OpenAIError as inner:
            raise litellm.InternalServerError("wrapped", "openai", "m") from inner
    except litellm.InternalServerError as exc:
        assert classify(exc)[0] == "credentials"


def test_user_message_names_models_and_how_to_fix_without_secrets() -> None:
    err = LLMError([Attempt("openai/gpt-4o-mini", "auth", 401), Attempt("ollama/llama3", "connection")])
    text = err.user_message()
    assert "openai/gpt-4o-mini" in text and "ollama/llama3" in text
    assert "ai.api_key" in text and "config.yaml" in text
    assert "No language model is configured" in LLMError([]).user_message()
