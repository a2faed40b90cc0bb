"""The OpenAI-compatible HTTP layer (Litestar app, protocol, SSE delivery, metrics)."""
