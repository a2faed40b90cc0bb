"""The executor of one process and one device: the model runner lives here, a step is a call."""
from __future__ import annotations

import torch

from atom.runner.scheduler_output import SchedulerOutput
from atom.runner.launched_step import LaunchedStep
from atom.runner.model_runner import ModelRunner
from atom.runner.profiler import step_label


class UniprocExecutor:
    def __init__(self, runner: ModelRunner) -> None:
        self.runner = runner
        self.num_blocks = runner.num_blocks
        self.max_model_len = runner.max_model_len
        self.vocab_size = runner.vocab_size
        self.device_type = runner.device.type

    def execute(self, out: SchedulerOutput) -> LaunchedStep:
        """Queue the step on the device; its tokens are read when the engine asks the result."""
        if not self.runner.profiler.active:
            return self.runner.launch(out)
        with torch.profiler.record_function(step_label(out)):
            return self.runner.launch(out)

    def device_usable(self) -> bool:
        """After a step raised: a CUDA error is sticky, so a device that still synchronises can
        run the other requests."""
        if self.runner.device.type != "cuda":
            return True
        try:
            torch.cuda.synchronize(self.runner.device)
        except Exception:
            return False
        return True

    def start_profile(self) -> None:
        self.runner.profiler.start()

    def stop_profile(self) -> None:
        self.runner.profiler.stop()

    def shutdown(self) -> None:
        self.runner.profiler.stop()
