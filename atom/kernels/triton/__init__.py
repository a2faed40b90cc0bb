"""Triton kernels, one op per module; `atom.kernels.triton_backend` wires them to the interface.

Nothing here runs at import beyond `@triton.jit` decoration, so importing a module costs no GPU
work. Set `TRITON_INTERPRET=1` before importing to run the kernels on CPU tensors (the tests do).
"""
