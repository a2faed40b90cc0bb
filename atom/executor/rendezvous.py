"""Where the ranks of one engine meet: which host runs which rank, the torch.distributed
rendezvous, and the ZMQ endpoints each step and answer travel through.

Ranks are split evenly over the hosts, host k running ranks k*L .. k*L+L-1 (L = world / nnodes).
On one host everything stays local: a free loopback port for the rendezvous (so several engines
and replicas never collide) and IPC sockets for the steps. With several hosts the rendezvous is
node 0's master_addr:master_port and node 0's executor also binds TCP endpoints on the next
ports: port+1 for every rank's answers, port+2+r for rank r's steps. The steps go to remote ranks
over the same ZMQ PUSH/PULL pairs as to local ones, not through a torch.distributed broadcast:
the engine core is no rank (a broadcast would add a hop through rank 0 on every step), and on
NCCL a broadcast of host bytes needs a second (gloo) group or a device copy and a sync per step.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Mapping

from atom.config.hosts import Hosts


# What torchrun sets for the launcher it starts. A rank's group comes from its spec alone: left in
# its environment, TORCHELASTIC_USE_AGENT_STORE makes torch.distributed's tcp:// rendezvous a
# client of the agent's store, so rank 0 never hosts the ranks' own and every rank waits.
_TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                  "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR",
                  "MASTER_PORT")


def rank_env(env: Mapping[str, str]) -> dict[str, str]:
    """The launcher's environment without torchrun's variables, for the ranks it starts."""
    return {k: v for k, v in env.items()
            if k not in _TORCHRUN_VARS and not k.startswith("TORCHELASTIC_")}


@dataclass(frozen=True)
class Endpoints:
    """What one host's ranks connect to, and what node 0's executor binds."""

    dist_init: str  # torch.distributed init_method
    to_worker: list[str]  # rank r pulls its steps from to_worker[r]
    from_worker: str  # where this host's ranks push their answers
    bind_to_worker: list[str]  # what node 0 binds for each rank ([] on other hosts)
    bind_from_worker: list[str]  # every endpoint node 0's answer socket binds


def node_ranks(world_size: int, hosts: Hosts, node_rank: int) -> list[int]:
    per_node = world_size // hosts.nnodes
    return list(range(node_rank * per_node, (node_rank + 1) * per_node))


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def tcp_endpoints(world_size: int, driver_ip: str, dist_init: str) -> Endpoints:
    """Every rank over TCP to the driver's free ports on `driver_ip`, wherever each runs: for
    ranks placed by another system (Ray), which may put any rank on any node."""
    to = [f"tcp://{driver_ip}:{free_port(driver_ip)}" for _ in range(world_size)]
    back = f"tcp://{driver_ip}:{free_port(driver_ip)}"
    return Endpoints(dist_init, to, back, to, [back])


def endpoints(world_size: int, hosts: Hosts, ipc_dir: str) -> Endpoints:
    """The endpoints as host `hosts.node_rank` sees them (`ipc_dir`: node 0's socket folder)."""
    ipc_to = [f"ipc://{ipc_dir}/to{r}" for r in range(world_size)]
    ipc_from = f"ipc://{ipc_dir}/from"
    if not hosts.multi:
        return Endpoints(f"tcp://127.0.0.1:{free_port()}", ipc_to, ipc_from, ipc_to, [ipc_from])
    addr, port = hosts.master_addr, hosts.master_port
    tcp_to = [f"tcp://{addr}:{port + 2 + r}" for r in range(world_size)]
    tcp_from = f"tcp://{addr}:{port + 1}"
    init = f"tcp://{addr}:{port}"
    if hosts.node_rank != 0:
        return Endpoints(init, tcp_to, tcp_from, [], [])
    local = set(node_ranks(world_size, hosts, 0))
    ip = socket.gethostbyname(addr)  # ZMQ binds an interface address, not a host name
    bind_to = [ipc_to[r] if r in local else f"tcp://{ip}:{port + 2 + r}"
               for r in range(world_size)]
    return Endpoints(init, ipc_to, ipc_from, bind_to, [ipc_from, f"tcp://{ip}:{port + 1}"])
