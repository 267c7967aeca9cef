"""The web channel: the chat page, its WebSocket and the REST message API, on the shared server."""
