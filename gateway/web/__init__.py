"""The shared web server, token auth, the OpenAI-compatible API and the console."""
