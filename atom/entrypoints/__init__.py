"""Network entry points: the OpenAI-compatible server and its flag-compatible launcher."""
