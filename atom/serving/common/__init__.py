"""What both wire dialects share: decoding bounds and strict bodies, errors, prompt input off
the event loop, sampling rules, one generation's lifecycle, streaming dispatch, SSE, metrics,
profiling."""
