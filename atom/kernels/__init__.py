"""Kernel backends behind one interface (see backend.py)."""
from atom.kernels.backend import KernelBackend, get_backend, resolve_backend_name
from atom.kernels.metadata import AttentionMetadata

__all__ = ["AttentionMetadata", "KernelBackend", "get_backend", "resolve_backend_name"]
