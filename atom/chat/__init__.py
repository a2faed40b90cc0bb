"""The chat layer: a conversation rendered through the model's template, and the model's raw
text read back as content, reasoning and tool calls, in terms no wire protocol owns (the OpenAI
and Anthropic endpoints in atom.serving convert to and from them). README.md here has the
reader's rules.

At startup (once per model; unknown format names raise before weights load):
    chat_io = chat_io.build_chat_io(cfg, tokenizer)
    # encoders.load_chat_encoder finds the template (configured file, the tokenizer's, the
    # model directory's, its Python encoder; plain ChatML when there is none), and
    # formats.resolve_model_formats reads from it: the tool-call format (or None: calls stay
    # text), the reasoning dialect, the thinking switch, whether its generation prompt opens
    # the reasoning channel.

Per request:
    rendered = chat_io.render(ChatRequest(messages, tools, tool_choice, ...))
    # rendered.token_ids is the prompt; rendered.generation is what add_generation_prompt added
    # (reasoning_dialects.generation_part), which says where the answer starts.
    reader = chat_io.reader(rendered)   # one reader.ResponseReader per choice
    stream=true:  for each text delta: events = reader.feed(delta); at the end reader.finish()
    stream=false: the same over one chunk (reader.read_response)

Events (tool_parser.events): ContentDelta(text), ReasoningDelta(text),
ToolCallStart(index, id, name) once the region's head (256 bytes) names a declared tool (or with
its arguments, for a shorter call), and ToolCallArgs(index, arguments) with the whole arguments
object as JSON once the call closed (or, where the model wrote no JSON object, its raw text).
A ToolCallStart always precedes the ToolCallArgs of its index.
"""
