"""Tool calls and reasoning: how a model's raw text becomes content, reasoning and tool_calls.

What the server calls. `create_app` already does all of this through
`tool_parser.chat_io.build_chat_io(cfg, tokenizer)`, which gives the chat renderer
(`ChatIO.render(req, messages) -> token ids`), the reader factory (`ChatIO.reader(req)`, a
`ChatTextReader` yielding `DeltaMessage`s) and, for /v1/messages (serving_messages.py), the
events-level `ChatIO.response_reader(req)`. Underneath:

At startup (once per model; unknown names raise before weights load):
    encoder = chat_encoders.load_chat_encoder(model_dir, cfg.format.chat_template,
                                              trust_remote_code)
    formats = tool_parser.resolve.resolve_model_formats(
        encoder, cfg.format.tool_call_parser, cfg.format.reasoning_dialect)
    # formats.tool_format: a ToolFormat class or None (calls stay plain text; logged)
    # formats.dialect: ReasoningDialect; formats.thinking_switch: ThinkingSwitch or None;
    # formats.opens_by_default: the template's own generation prompt opens the channel

Per request:
    kwargs = formats.thinking_switch.kwargs(enabled) if a client chose (else leave the default)
    prompt = chat_encoders.apply_chat_template(encoder, messages, tools,
                                               add_generation_prompt=True, **kwargs)
    without = the same with add_generation_prompt=False
    generation = reasoning_dialects.generation_part(prompt, without, formats.dialect)
    channel = reasoning.ReasoningChannel.for_request(formats.dialect, generation, thinking_off,
                                                     formats.opens_by_default)
    policy = tool_parser.policy.ToolPolicy.from_request(tools, tool_choice)
    reader = tool_parser.response.ResponseReader(channel, formats.tool_format, policy)
    stream=true:  for each text delta: events = reader.feed(delta); at the end reader.finish()
    stream=false: events = tool_parser.response.read_response(channel, fmt, text, policy)

Events (tool_parser.events): ContentDelta(text), ReasoningDelta(text),
ToolCallStart(index, id, name) once the region's head (256 bytes) names a declared tool (or with
its arguments, for a shorter call), and
ToolCallArgs(index, arguments) with the whole arguments object as JSON once the call closed (or,
where the model wrote no JSON object, its raw text).
A ToolCallStart always precedes the ToolCallArgs of its index; finish_reason is "tool_calls" when
any ToolCallArgs was emitted.
"""
