"""The chat layer: a conversation rendered through the model's template, and the model's raw
text read back as content, reasoning and tool calls, in terms no wire protocol owns (the OpenAI
and Anthropic endpoints in atom.serving convert to and from them)."""
