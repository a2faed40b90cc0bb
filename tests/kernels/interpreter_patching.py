"""Triton's interpreter re-patches `triton.language` on every nested `@triton.jit` call; within
one launch, a module it has already patched is skipped here.

Why: a launch patches the language modules its kernel's globals name and restores them when the
grid is done; in between, every call of a jit'd helper (`tl.zeros`, `tl.cdiv`, atom's
`paged_kv_offsets`, ...) runs `_patch_lang` again, which walks `inspect.getmembers` of
`triton.language`, its tensor class and math module to wrap builtins that are already wrapped.
That was a third of the CPU time of the interpreted engine tests. A module patched earlier in
the same launch is in the state a repeat would leave it in, so skipping the repeat runs the
kernels exactly as before. Only the interpreter (TRITON_INTERPRET=1) is touched; on a GPU, or
with an interpreter whose internals differ, nothing is patched and the kernels run as they are.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Any, Callable, Iterator, Optional

import pytest


def _language_modules(fn: Callable, tl: Any) -> set[int]:
    return {id(v) for v in fn.__globals__.values()
            if inspect.ismodule(v) and v in (tl, tl.core)}


@contextlib.contextmanager
def nested_calls_reuse_the_launch_patch() -> Iterator[None]:
    """While open, a nested jit call inside a launch patches only modules the launch has not."""
    import triton.language as tl
    from triton.runtime import interpreter

    grid_call = getattr(interpreter.GridExecutor, "__call__", None)
    patch_lang = getattr(interpreter, "_patch_lang", None)
    scope_cls = getattr(interpreter, "_LangPatchScope", None)
    if grid_call is None or patch_lang is None or scope_cls is None:
        yield
        return
    patched: list[Optional[set[int]]] = [None]  # the running launch's patched modules

    @functools.wraps(grid_call)
    def launch(self: Any, *args: Any, **kwargs: Any) -> Any:
        outer, patched[0] = patched[0], set()
        try:
            return grid_call(self, *args, **kwargs)
        finally:
            patched[0] = outer

    @functools.wraps(patch_lang)
    def patch_once(fn: Callable) -> Any:
        modules, done = _language_modules(fn, tl), patched[0]
        if done is not None and modules <= done:
            return scope_cls()
        scope = patch_lang(fn)
        if done is not None:
            done.update(modules)
        return scope

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(interpreter.GridExecutor, "__call__", launch)
        mp.setattr(interpreter, "_patch_lang", patch_once)
        yield
