"""The executor of several ranks as Ray actors (`parallel.executor=ray`), for clusters that
already run Ray.

Ray places the ranks and owns their processes, nothing more: one actor per rank in one placement
group (a bundle of one GPU each, or one CPU on a CPU run; each actor sees its node's ranks' GPUs
and takes its own), each running the same worker loop as
a multiproc rank (atom/executor/worker.py): the same torch.distributed group, the steps and
answers over the same ZMQ transport (rank_driver.py), over TCP since an actor may sit on any node
of the cluster. The engine connects to the running cluster (RAY_ADDRESS, else the one `ray
start` left on this host), or starts a local one that its shutdown also ends; a program that
already called ray.init keeps its own. A rank's actor that dies ends its run() call, which the
next wait sees (WorkerDied at once); shutdown stops the ranks, kills their actors and frees the
placement group.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, NamedTuple, Optional

from atom.config.schema import Config
from atom.executor.rank_driver import BuildRunner, RankDriver, WorkerDied, worker_env
from atom.executor.rendezvous import Endpoints, free_port, tcp_endpoints
from atom.executor.worker import WorkerSpec

log = logging.getLogger("atom.executor")

# How long the cluster may take to find room for every rank's bundle: past it the start fails,
# naming what was asked and what the cluster has free, instead of waiting on it.
PLACEMENT_S = 120.0


class Placement(NamedTuple):
    """Where Ray put one rank's actor."""

    ip: str  # its node's address
    pid: int
    port: int  # free on its node: rank 0's hosts the torch.distributed store
    gpus: list[str]  # the GPU ids Ray gave it (none on a CPU run)


class RankActor:
    """One rank's Ray actor: where it runs, then the worker loop until Stop."""

    def where(self) -> Placement:
        import ray

        ip = ray.util.get_node_ip_address()
        return Placement(ip, os.getpid(), free_port(ip), [str(g) for g in ray.get_gpu_ids()])

    def run(self, spec: WorkerSpec, rank: int, visible_gpus: Optional[str]) -> int:
        """`visible_gpus`: every GPU of this node's ranks, set before CUDA starts, so that
        NCCL sees its peers' GPUs (P2P over NVLink) where Ray would show each actor only its
        own; the rank takes its own by its place among this node's ranks (spec.local_ranks)."""
        from atom.executor.worker import serve
        from atom.log_setup import configure_logging

        if visible_gpus is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = visible_gpus
        configure_logging()
        try:
            serve(spec, rank)
        except SystemExit as e:  # a failed rank reported itself; the actor is killed at shutdown
            return int(e.code or 0)
        return 0


class RayExecutor(RankDriver):
    def __init__(self, cfg: Config, hf: Any, world_size: int, build_runner: BuildRunner) -> None:
        import ray

        self._ray = ray
        self._owns_connection = False  # ray.init called here, so ray.shutdown at the end
        self._pg: Any = None
        self._actors: list[Any] = []  # in rank order
        self._runs: list[Any] = []  # each rank's run() future: ready only once the rank ended
        self._places: list[Placement] = []  # in rank order
        self.pids: list[int] = []  # each rank's process (on its node)
        self._gpu = False
        super().__init__(cfg, hf, world_size, build_runner)

    def _place_ranks(self, cfg: Config) -> Endpoints:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        ray = self._ray
        self._connect(cfg)
        self._gpu = (cfg.runtime.device != "cpu"
                     and ray.cluster_resources().get("GPU", 0) > 0)
        bundle = {"GPU": 1.0} if self._gpu else {"CPU": 1.0}
        self._pg = placement_group([bundle] * self.world_size, strategy="PACK")
        placed, _ = ray.wait([self._pg.ready()], timeout=PLACEMENT_S)
        if not placed:
            raise WorkerDied(f"the Ray cluster found no room for {self.world_size} bundles of "
                             f"{bundle} in {PLACEMENT_S:.0f} s (free: "
                             f"{ray.available_resources()})")
        actor = ray.remote(RankActor)
        env = worker_env(not self._gpu, self.world_size)
        actors = [actor.options(
            num_cpus=0 if self._gpu else 1, num_gpus=1 if self._gpu else 0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                self._pg, placement_group_bundle_index=i),
            runtime_env={"env_vars": env}).remote() for i in range(self.world_size)]
        self._actors = actors
        where = ray.get([a.where.remote() for a in actors], timeout=PLACEMENT_S)
        here = ray.util.get_node_ip_address()
        # Ranks of one node consecutive, this node's first: rank 0 beside the engine when the
        # cluster has room here.
        order = sorted(range(self.world_size), key=lambda i: (where[i].ip != here, where[i].ip))
        self._actors = [actors[i] for i in order]
        self._places = [where[i] for i in order]
        self.pids = [p.pid for p in self._places]
        log.info("Ray placed %d ranks on %s", self.world_size,
                 sorted({p.ip for p in self._places}))
        first = self._places[0]
        return tcp_endpoints(self.world_size, here, f"tcp://{first.ip}:{first.port}")

    def _connect(self, cfg: Config) -> None:
        """The cluster named by RAY_ADDRESS or running on this host, else a local one."""
        ray = self._ray
        if ray.is_initialized():
            return
        quiet = dict(include_dashboard=False, configure_logging=False)
        try:
            ray.init(address="auto", **quiet)
        except ConnectionError:
            if os.environ.get("RAY_ADDRESS"):
                raise  # the cluster asked for is not there: never a local one in its place
            cpus = os.cpu_count() or 1
            ray.init(num_cpus=max(cpus, self.world_size) if cfg.runtime.device == "cpu" else None,
                     **quiet)
        self._owns_connection = True

    def _start_ranks(self, cfg: Config, hf: Any, build_runner: BuildRunner,
                     ends: Endpoints) -> None:
        if self._gpu:  # each rank's GPU is found among its node's (RankActor.run)
            cfg = dataclasses.replace(cfg, runtime=dataclasses.replace(cfg.runtime,
                                                                       device="cuda"))
        for rank, (actor, (local, visible)) in enumerate(
                zip(self._actors, node_layout(self._places, self._gpu))):
            spec = WorkerSpec(cfg, hf, build_runner, self.world_size, ends.dist_init,
                              ends.to_worker, ends.from_worker, None, local)
            self._runs.append(actor.run.remote(spec, rank, visible))

    def _check_ranks(self) -> None:
        if not self._runs:
            return
        ended, _ = self._ray.wait(self._runs, num_returns=len(self._runs), timeout=0)
        if ended:
            rank = self._runs.index(ended[0])
            try:
                how = f"exit code {self._ray.get(ended[0])}"
            except Exception as e:  # the actor died: Ray's first line says how
                how = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
            raise WorkerDied(f"rank {rank}'s Ray actor ended ({how})")

    def _stop_ranks(self, grace_s: float) -> None:
        ray = self._ray
        if self._runs:
            ray.wait(self._runs, num_returns=len(self._runs), timeout=grace_s)
        for a in self._actors:
            ray.kill(a)
        if self._pg is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self._pg)
        if self._owns_connection:
            ray.shutdown()  # a local cluster ends with it; a running one only loses this driver


def node_layout(places: list[Placement], gpu: bool) -> list[tuple[list[int], Optional[str]]]:
    """Per rank (places in rank order): the ranks of its node (its spec.local_ranks: its GPU
    is cuda:<its place among them>) and, on GPUs, the CUDA_VISIBLE_DEVICES that lists theirs
    in that order."""
    layout = []
    for place in places:
        local = [r for r, p in enumerate(places) if p.ip == place.ip]
        visible = ",".join(places[r].gpus[0] for r in local) if gpu else None
        layout.append((local, visible))
    return layout
