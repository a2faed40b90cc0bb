"""torch profiler around engine steps, traces under `{profiler_dir}/rank_{rank}/` (or
`dp{d}_tp{r}` with data parallelism). ATOM_PROFILER_MORE=1 adds shapes, stacks and memory."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from atom.runner.scheduler_output import SchedulerOutput

if TYPE_CHECKING:
    import torch

log = logging.getLogger("atom.profiler")
NO_DIR = "profiling needs a profiler dir (--torch-profiler-dir or ATOM_TORCH_PROFILER_DIR)"


def rank_dir(profiler_dir: str, rank: int, dp_rank: Optional[int] = None) -> Path:
    name = f"dp{dp_rank}_tp{rank}" if dp_rank is not None else f"rank_{rank}"
    return Path(profiler_dir) / name


def step_label(out: SchedulerOutput) -> str:
    """A step's name in a trace: what it runs and how much."""
    kind = "decode" if all(len(r.token_ids) == 1 for r in out.requests) else "prefill"
    return f"{kind}[bs={len(out.requests)} tok={out.total_tokens}]"


class StepProfiler:
    def __init__(self, profiler_dir: Optional[str], rank: int = 0, dp_rank: Optional[int] = None):
        self.dir = rank_dir(profiler_dir, rank, dp_rank) if profiler_dir else None
        self._prof: Optional["torch.profiler.profile"] = None

    @property
    def active(self) -> bool:
        return self._prof is not None

    def start(self) -> None:
        if self.dir is None:
            raise RuntimeError(NO_DIR)
        if self._prof is not None:
            return
        import torch  # here: the multi-process executor imports this module and never torch

        self.dir.mkdir(parents=True, exist_ok=True)
        more = os.environ.get("ATOM_PROFILER_MORE") == "1"
        acts = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        self._prof = torch.profiler.profile(
            activities=acts, record_shapes=more, with_stack=more, profile_memory=more,
            on_trace_ready=torch.profiler.tensorboard_trace_handler(str(self.dir), use_gzip=True))
        self._prof.start()
        log.info("profiler started; traces go to %s", self.dir)

    def stop(self) -> None:
        if self._prof is None:
            return
        prof, self._prof = self._prof, None
        prof.stop()
        log.info("profiler stopped; traces in %s", self.dir)
