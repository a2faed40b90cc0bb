"""Tool-call wire formats: one module per format, `registry.py` resolves one from the template,
and `stream.py` is the one reader that reads them all."""
