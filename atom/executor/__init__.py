"""Executors: what runs a step's SchedulerOutput on the model's devices (one process today)."""
