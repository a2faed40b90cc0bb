"""The OpenAI wire: /v1/chat/completions, /v1/completions, /tokenize and their protocol."""
