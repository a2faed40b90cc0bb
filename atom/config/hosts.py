"""Which hosts a run spans and where they meet: the parallel group's host fields, filled from
torchrun's (or a cluster scheduler's) environment where the config leaves them unset.

atom starts each host's ranks itself, so torchrun runs one atom launcher per host
(`--nproc-per-node 1`): its WORLD_SIZE is then the host count and its RANK / GROUP_RANK the
host's index, and its agent's store holds MASTER_PORT (atom's ports then start one above). A
field set in the config wins over the environment; unset everywhere, a run is one host
rendezvousing on loopback.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

from atom.config.errors import ConfigError
from atom.config.schema import ParallelConfig

DEFAULT_MASTER_ADDR = "127.0.0.1"
DEFAULT_MASTER_PORT = 29500  # torchrun's default, so a torchrun-started host needs no setting


@dataclass(frozen=True)
class Hosts:
    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int
    # field → the environment variable it was read from (a bad value's error says where)
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    def origin(self, name: str) -> str:
        var = self.sources.get(name)
        return f" (from ${var}; parallel.{name} overrides it)" if var else ""

    @property
    def multi(self) -> bool:
        return self.nnodes > 1


def _env_int(env: Mapping[str, str], *names: str) -> tuple[Optional[int], Optional[str]]:
    """The first of `names` set in env, as an int, and its name (a bad value names its variable)."""
    for name in names:
        raw = env.get(name)
        if raw not in (None, ""):
            try:
                return int(raw), name
            except ValueError:
                raise ConfigError(name, raw, "must be an integer (environment variable)")
    return None, None


def resolve_hosts(p: ParallelConfig, env: Mapping[str, str]) -> Hosts:
    """The host layout of `p` under `env` (os.environ where it runs). torchrun's WORLD_SIZE and
    RANK count launchers, which are hosts only under --nproc-per-node 1: with more per host
    (LOCAL_WORLD_SIZE > 1) they are refused, naming the variable."""
    local, _ = _env_int(env, "LOCAL_WORLD_SIZE")
    if local is not None and local > 1 and (p.nnodes is None or p.node_rank is None):
        raise ConfigError("LOCAL_WORLD_SIZE", local, "atom starts each host's ranks itself: "
                          "run one launcher per host (torchrun --nproc-per-node 1)")
    sources: dict[str, str] = {}

    def pick(name: str, value: Optional[int], *variables: str) -> Optional[int]:
        if value is not None:
            return value
        value, var = _env_int(env, *variables)
        if var is not None:
            sources[name] = var
        return value

    nnodes = pick("nnodes", p.nnodes, "NNODES", "WORLD_SIZE")
    node_rank = pick("node_rank", p.node_rank, "NODE_RANK", "GROUP_RANK", "RANK")
    port = pick("master_port", p.master_port, "MASTER_PORT")
    if p.master_port is None and port is not None and env.get("TORCHELASTIC_RUN_ID"):
        port += 1  # torchrun's agent holds MASTER_PORT for its own store: atom's ranks meet above it
    return Hosts(nnodes=1 if nnodes is None else nnodes,
                 node_rank=0 if node_rank is None else node_rank,
                 master_addr=p.master_addr or env.get("MASTER_ADDR") or DEFAULT_MASTER_ADDR,
                 master_port=DEFAULT_MASTER_PORT if port is None else port, sources=sources)
