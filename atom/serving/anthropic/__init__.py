"""The Anthropic wire: /v1/messages and its protocol."""
