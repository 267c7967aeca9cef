"""The model client (LiteLLM, retries, fallbacks) and the OpenAI-wire fast path."""
