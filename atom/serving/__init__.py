"""The HTTP server: the Litestar app, the pieces both wire dialects share (errors, SSE, prompt
input, streaming dispatch, metrics), and the OpenAI and Anthropic endpoints beside each other."""
