"""Config tree, its Hydra store, validation and composition."""
from atom.config.errors import ConfigError
from atom.config.schema import (
    Config, KVCacheConfig, LoadConfig, ModelConfig, ParallelConfig, ProfilerConfig, RuntimeConfig,
    SchedulerConfig, SpecDecodeConfig,
)
from atom.config.format import FormatConfig
from atom.config.server import ServerConfig
from atom.config.bench import BenchConfig

CompilationConfig = RuntimeConfig  # the spec's name for the compile/runtime group
SpeculativeConfig = SpecDecodeConfig

__all__ = [
    "BenchConfig", "CompilationConfig", "Config", "ConfigError", "FormatConfig", "KVCacheConfig",
    "LoadConfig", "ModelConfig", "ParallelConfig", "ProfilerConfig", "RuntimeConfig",
    "SchedulerConfig", "ServerConfig", "SpecDecodeConfig", "SpeculativeConfig",
]
