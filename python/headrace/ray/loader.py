"""headrace.ray.Loader: a rank's batches computed by a pool of worker actors on other nodes.

    rank (this process)                  coordinator (metadata)        workers (C++ engine)
    want batch j ── assign(k) ─────────▶ least-loaded live worker
                 ◀── worker handle ────┘
                 ── worker.get_batch.remote(k) ─────────────────────▶ Submit(k), Take(k)
                 ◀── ObjectRef (owned by the rank) ◀── numpy arrays in the worker node's
                                                       object store (one copy)
    ray.get in order; a dead worker's refs ── failed(k) ─▶ another worker, same bytes
    done(j) ─────────────────────────────▶ journaled position

``k`` is the run-wide batch index over all ranks: rank r of W consumes, in each epoch e,
batches ``e * batches_per_epoch + i * W + r`` for i = 0, 1, ...: the same batches, in the
same order, as :class:`headrace.Loader` gives rank r of W.
"""
from __future__ import annotations

import collections
import json
import os
import socket
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Dict, List, Optional, Union

from .. import _headrace
from ..loader import Loader as _LocalLoader
from ..loader import Batch, _listen_address, default_rank_and_world_size
from ..pipeline import Pipeline
from ._coordinator import DEFAULT_LEASE_S, Coordinator, node_fits
from ._metrics import RankMetrics, node_address, rank_port

PLACEMENTS = ("spread", "pack")
# Workers that may die, one after another, computing the same batch before the rank gives
# up on it (_Stream.next): one or two are a lost node; more, a sample that crashes them.
MAX_WORKER_DEATHS_PER_BATCH = 3


def _ray():
    import ray
    return ray


def _connect(address: Optional[str]) -> None:
    """Attaches to the Ray cluster (``ray.init(address)``; "auto": the one running on this
    machine or RAY_ADDRESS) unless this process already is; a clear error when there is
    none, before any work."""
    ray = _ray()
    if ray.is_initialized():
        return
    if address and address != "auto" and "://" not in address:
        # ray.init retries an address where nothing listens for minutes: look first.
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host or "127.0.0.1", int(port)), timeout=5).close()
        except (OSError, ValueError) as e:
            raise _headrace.ConfigError(
                f"headrace.ray: no Ray cluster reachable at {address}: {e}. Start one "
                "(`ray start --head`), pass the head's GCS address, or call ray.init() "
                "first") from None
    try:
        ray.init(address=address or "auto", namespace="headrace", log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise _headrace.ConfigError(
            f"headrace.ray: no Ray cluster reachable at {address or 'auto (RAY_ADDRESS or a local `ray start`)'}: "
            f"{e}. Start one (`ray start --head`), pass address=..., or call ray.init() "
            "first") from None


def _check_resources(resources: Dict[str, float]) -> None:
    """Fails, naming the resource, when no node of the cluster could host one worker."""
    ray = _ray()
    for key, amount in resources.items():
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount < 0:
            raise _headrace.ConfigError(
                f"worker_resources: {key} must be a number >= 0, got {amount!r}")
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    for key, amount in resources.items():
        if amount > 0 and not any(n["Resources"].get(key, 0) >= amount for n in nodes):
            offered = sorted({k for n in nodes for k in n["Resources"]
                              if not k.startswith("node:") and "_group_" not in k})
            raise _headrace.ConfigError(
                f"worker_resources: no node of the Ray cluster has {key}={amount:g} "
                f"({len(nodes)} alive nodes; resources they offer: {', '.join(offered)})")
    if not any(node_fits(n, resources) for n in nodes):
        raise _headrace.ConfigError(
            f"worker_resources: no single node of the Ray cluster has all of {resources}")


def default_prefetch(workers: int, batch_bytes: int = 0, store_bytes: int = 0) -> int:
    """The request window a rank keeps when ``prefetch`` is not given, for a pool of
    ``workers``: two requests a worker keep its compute and its node's link busy while the
    other's batch crosses (bench/ray_netns.py: windows of 6, 8 and 12 with 2 workers were
    no better over 200 and 500 Mbit/s links, and worse with a trainer that steps). Every
    requested batch is pulled to the rank's node at once, so that node's object store
    holds up to window × batch bytes: once a batch's size is known, the window is capped to
    a quarter of the store (``store_bytes``; the rest is for the other ranks of the node,
    the batches in use and Ray's own objects), and never below 2."""
    window = max(4, 2 * workers)
    if batch_bytes > 0 and store_bytes > 0:
        window = max(2, min(window, store_bytes // 4 // batch_bytes))
    return window


def _node_store_bytes(ray) -> int:
    """The object store memory of the node this process runs on (0: unknown)."""
    here = ray.get_runtime_context().get_node_id()
    for node in ray.nodes():
        if node.get("NodeID") == here:
            return int(node.get("Resources", {}).get("object_store_memory", 0))
    return 0


def _train_context():
    """(rank, world_size) from Ray Train when this process is one of its workers."""
    if "ray.train" not in sys.modules:
        return None
    try:
        import ray.train
        ctx = ray.train.get_context()
        rank, world = ctx.get_world_rank(), ctx.get_world_size()
    except Exception:
        return None
    if rank is None or world is None:
        return None
    return int(rank), int(world)


class _Heartbeat:
    """A thread that tells the coordinator every quarter of its lease that this rank is
    alive, whether or not the trainer iterates (an evaluation, a checkpoint, a slow step):
    the pool ends only when no rank was heard from for the whole lease (a killed trainer).
    It holds the coordinator's handle, not the loader, so a loader that is garbage
    collected (``__del__`` closes it) stops it."""

    def __init__(self, coordinator, rank: int, lease_s: float):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, args=(coordinator, rank, lease_s / 4),
                                        name="headrace-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self, coordinator, rank: int, every_s: float) -> None:
        while not self._stop.wait(every_s):
            try:
                coordinator.heartbeat.remote(rank)  # fire and forget: retried across a restart
            except Exception:
                return  # Ray is shut down in this process

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()


class _Stream:
    """A rank's batches from (epoch, batch) on, served by the pool: what
    :class:`headrace.Loader` calls its engine (``next()``, ``next_batch``, ...)."""

    def __init__(self, loader: "Loader", start_epoch: int, start_batch: int):
        ray = _ray()
        self._ray = ray
        self._loader = loader
        self._coord = loader._coordinator
        info = loader._run_info
        self.rank, self.world_size = loader.rank, loader.world_size
        # An elastic resume's epoch: the rest of an epoch, a run of its own (that epoch
        # alone, its batches dealt to this run's ranks as the local loader deals them).
        # The workers compute it with an engine over the rest; its batch k is -1 - its
        # run-wide index, apart from the full epochs' batches.
        rest = loader._remainder if loader._in_remainder() else None
        self._rest = None if rest is None else (dict(rest), loader._blend_start)
        # This rank's share of an epoch and of the run: the engine's rule (exec/epoch_order.h
        # RankShareOf), over the run-wide count of batches the workers compute; for a rest,
        # the order the local loader's ranks would follow, checked as theirs is.
        if rest is None:
            self._global_per_epoch = info["batches_per_epoch"]
            self.batches_per_epoch, self.total_batches = _headrace._rank_share(
                self._global_per_epoch, loader._spec.batch_size, self.world_size,
                loader._spec.epochs)
        else:
            self._global_per_epoch, self.batches_per_epoch, self.total_batches = \
                loader._prepared_pipeline().rank_share(self.world_size, *self._rest)
        self.next_batch = start_epoch * self.batches_per_epoch + start_batch
        self._requested = self.next_batch  # the next rank-local batch to request
        self._pending: collections.deque = collections.deque()  # [j, k, worker, ref]
        self._workers = 1
        self._store_bytes = _node_store_bytes(ray)  # caps the default window
        self._batch_bytes = 0  # the largest batch seen
        self._finished: List = []  # (worker, k) received since the last done()
        # Consumer accounting and the error budgets (the run's, a blend's entries'): the C++
        # rules, through the bindings (exec/consumer_clock.h, exec/run_budget.h).
        self._clock = _headrace._ConsumerClock(time.perf_counter())
        self._budget = _headrace._RunBudget(loader._spec)
        self._bytes = 0
        self._reassigned = 0
        self._others = (0, 0)  # (delivered, failed) the other ranks consumed: coordinator
        self._by_worker: Dict[int, int] = collections.Counter()
        self._window = (time.perf_counter(), 0.0, 0)  # autoscale: (since, wait_s, batches)

    def _k(self, j: int) -> int:
        """Rank-local run batch j -> run-wide batch index over all ranks (the engine's
        EpochOrder rule, exec/epoch_order.h)."""
        k = _headrace._run_batch_index(j, self._global_per_epoch, self.world_size, self.rank)
        return k if self._rest is None else -1 - k

    def _ahead(self) -> int:
        if self._loader._prefetch is not None:
            return self._loader._prefetch
        return default_prefetch(self._workers, self._batch_bytes, self._store_bytes)

    def _fill(self) -> None:
        want = self._ahead() - len(self._pending)
        if self.total_batches is not None:
            want = min(want, self.total_batches - self._requested)
        if want <= 0:
            return
        js = list(range(self._requested, self._requested + want))
        ks = [self._k(j) for j in js]
        # Requests an earlier stream of this loader left running (a `for` left early, a
        # repositioning) are taken over, not made again.
        orphans = self._loader._orphans
        fresh = [k for k in ks if k not in orphans]
        assigned = {}
        if fresh:
            got, self._workers, self._others = self._ray.get(
                self._coord.assign.remote(self.rank, fresh))
            assigned = dict(zip(fresh, got))
        for j, k in zip(js, ks):
            if k in orphans:
                wid, ref = orphans.pop(k)
            else:
                wid, handle = assigned[k]
                ref = handle.get_batch.remote(k, self._rest)
            self._pending.append([j, k, wid, ref])
        self._requested += want
        # Start moving every requested batch to this node now, not when `next` blocks on
        # it: Ray pulls an object only when something here asks for it, so without this at
        # most one batch crossed the network at a time and spreading the workers over CPU
        # nodes gained nothing (bench/ray_netns.py, 200 Mbit/s links: spread 1.00x pack
        # without it, 1.84x with it). timeout=0: nothing waits here.
        self._ray.wait([e[3] for e in self._pending], num_returns=len(self._pending),
                       timeout=0, fetch_local=True)

    def _reassign(self, dead: int) -> None:
        """Every pending request to worker ``dead`` goes to another worker."""
        for entry in self._pending:
            if entry[2] == dead:
                wid, handle = self._ray.get(
                    self._coord.failed.remote(self.rank, entry[1], dead))
                entry[2], entry[3] = wid, handle.get_batch.remote(entry[1], self._rest)
                self._reassigned += 1

    def next(self):
        got = self.next_input()
        return None if got is None else got[0]

    def next_input(self):
        """The next batch as (``next()``'s tuple, its tally, the other ranks' (delivered,
        failed) as the coordinator last told), or None after the last: what a former's
        input pulls (python/src/former.cc), the errors whole in the tally."""
        if self.total_batches is not None and self.next_batch >= self.total_batches:
            return None
        call = time.perf_counter()
        self._fill()
        entry = self._pending[0]
        deaths = 0
        while True:
            try:
                out = self._ray.get(entry[3])
                break
            except self._ray.exceptions.RayActorError:
                # A worker lost to its node is replaced and its batches recomputed; a batch
                # whose every worker dies is one of its samples crashing the engine (a
                # segfault, an abort), and would kill every replacement in turn: fail
                # instead of looping, naming the batch.
                deaths += 1
                if deaths >= MAX_WORKER_DEATHS_PER_BATCH:
                    self._ray.get(self._coord.died.remote(entry[2]))
                    epoch, batch = divmod(entry[0], self.batches_per_epoch)
                    raise RuntimeError(
                        f"headrace.ray: {deaths} workers in a row died computing epoch "
                        f"{epoch}, batch {batch} of rank {self.rank} (run-wide batch "
                        f"{entry[1]}): a sample in it (or in a batch computed beside it) "
                        "crashes the engine. The workers' logs (`ray logs`) say how; "
                        "headrace.Loader over the same pipeline names the sample.") from None
                self._reassign(entry[2])
        self._pending.popleft()
        j, k, wid, _ = entry
        self.next_batch = j + 1
        self._finished.append((wid, k))
        epoch, batch = divmod(self.next_batch, self.batches_per_epoch)
        fields = out["fields"]
        n = len(fields["index"])
        self._batch_bytes = max(self._batch_bytes, out["bytes"])  # before the refill
        # The batch's rows and errors, each given its blend entry by the worker (the
        # batch's tally), counted once into the run's budget and its entries'.
        self._budget.count(out["tally"], out["errors"])
        # Fire and forget: calls from one caller run in order on the actor.
        self._coord.done.remote(self.rank, self._finished, epoch, batch,
                                (self._budget.delivered, self._budget.failed))
        self._finished = []
        self._fill()  # keep the window full while the consumer works on this batch
        self._bytes += out["bytes"]
        self._by_worker[out["worker"]] += 1
        # The error budgets, applied where the batches are consumed, whichever worker
        # computed them. The run's: this rank's samples (exact, in batch order) plus what the
        # other ranks consumed, as the coordinator last told (a batch or so behind). Every
        # rank stops once the run's rate is over the limit, also one without errors of its
        # own; a rank whose own share is bad stops only when the run's is. A blend entry's
        # own rate: over this rank's batches, as each local rank applies it.
        self._budget.check((j + 1) % self.batches_per_epoch == 0, *self._others, self.rank)
        self._clock.returned(call, time.perf_counter(), True, n)
        self._loader._maybe_autoscale(self)
        ptrs = {name: v.ctypes.data for name, v in fields.items() if hasattr(v, "ctypes")}
        return ((fields, out["epoch"], out["index"], j, out["errors"], ptrs), out["tally"],
                self._others)

    def window_wait_ratio(self):
        """The wait-time ratio since the last call (autoscale), and the batches in it."""
        since, wait_before, batches_before = self._window
        now = time.perf_counter()
        stats = self._clock.stats()
        self._window = (now, stats["wait_s"], stats["batches"])
        span = now - since
        ratio = (stats["wait_s"] - wait_before) / span if span > 0 else 0.0
        return ratio, stats["batches"] - batches_before

    def consumer_stats(self) -> Dict[str, Any]:
        s = self._clock.stats()
        s["batches_per_s"] = s["batches"] / s["steady_s"] if s["steady_s"] > 0 else 0.0
        s["bytes_moved"] = self._bytes
        s["window"] = self._ahead()  # requests kept ahead of consumption
        s["rank_reassignments"] = self._reassigned
        s["samples_failed"] = self._budget.failed
        s["batches_by_worker"] = dict(self._by_worker)
        # A blend: each entry's samples and errors in this rank's batches (the local
        # loader's keys; its source.<name>.bytes_read is the workers' and not here).
        s.update(self._budget.entry_stats())
        return s

    def report_json(self) -> str:
        return json.dumps({"consumer": self.consumer_stats(),
                           "pool": self._ray.get(self._coord.stats.remote())})

    def close(self) -> None:
        # Requests never consumed go to the loader: a later stream that needs the same
        # batches takes them over (the next epoch's first ones, after a `for` left early).
        for _, k, wid, ref in self._pending:
            self._loader._orphans[k] = (wid, ref)
        self._pending.clear()


class _PackedStream:
    """A rank's stream formed (batch.pack, batch.max_tokens) by the former a local
    :class:`headrace.Loader` with the same options holds (exec/pack_former.h, through
    python/src/former.cc): the former pulls the stream's batches, packs them, counts the
    samples it loses in this rank's error budgets and holds the errors of batches with no
    samples; here only ``next()`` is called. The same ``next()`` tuple, with the packed
    batch's fields."""

    def __init__(self, loader: "Loader", epoch: int, batch: int):
        rest = loader._remainder if loader._in_remainder() else None
        prepared = loader._prepared_pipeline()
        pack = loader._pack_state
        if pack is not None and (pack.get("epoch"), pack.get("next_batch")) != (epoch, batch):
            pack = None  # another position: the former replays its epoch up to `batch`
        self._former = _headrace._Former.make(
            prepared, loader.rank, loader.world_size, epoch, batch, pack_state=pack,
            remainder=rest, blend_start=loader._blend_start if rest else None)
        # It starts where the saved window began, or at the epoch's first batch to replay
        # up to `batch`.
        self._stream = _Stream(loader, *self._former.start)
        self._input = _headrace._PulledInput(
            self._stream.next_input, self._stream._budget, self._stream.rank,
            self._stream.batches_per_epoch, prepared)

    def __getattr__(self, name):  # batches_per_epoch, total_batches, close, ...
        return getattr(self._stream, name)

    @property
    def next_batch(self) -> int:
        return self._stream.next_batch - self._former.inputs_held

    def next(self):
        return self._former.next(self._input)

    def pack_state(self):
        return self._former.state()

    def consumer_stats(self):
        stats = self._stream.consumer_stats()
        stats.update(self._former.stats())
        return stats


class Loader(_LocalLoader):
    """:class:`headrace.Loader` whose batches a pool of Ray worker actors computes.

    The same iteration (one epoch per ``for``, ``set_epoch``, ``len``), the same batches
    for the same rank (byte-identical), the same ``state_dict()``, which resumes here with
    any number of workers or in a local :class:`headrace.Loader`. Batches are numpy arrays
    (read-only views of Ray's object store: zero-copy on the worker's node, one transfer
    from another).

    ``workers``: the pool's size (``scale(n)`` changes it while running). ``placement``:
    "spread" (default: Ray's SPREAD strategy, workers on as many nodes as have the
    resources) or "pack" (as few nodes as possible). ``worker_resources``: what each
    worker reserves, e.g. ``{"CPU": 2, "headrace_cpu": 1}`` to run only on nodes that
    offer a custom ``headrace_cpu`` resource; its CPU count is also the worker engine's
    threads when the pipeline's ``cpu_threads`` is 0. ``min_workers``/``max_workers``:
    when either is given, rank 0 resizes the pool within them: one more worker while the
    ranks' recent wait-time ratio is above ``target_wait_time_ratio``, one fewer while it is
    under a quarter of it. ``prefetch``: requests each rank keeps ahead of its consumption
    (default max(4, 2 × workers), capped to a quarter of the rank node's object store once
    a batch's size is known); each is pulled to the rank's node when requested, so its
    object store holds up to ``prefetch`` × batch bytes. ``rank``/``world_size``: from
    Ray Train's context inside a ``TorchTrainer``, else as :class:`headrace.Loader`. Ranks
    that pass the same ``name`` (default: derived from the pipeline and world size when
    world_size > 1) share one pool; its coordinator journals to ``journal`` (default under
    the temp folder of its node).
    ``address``: the Ray cluster to attach to when this process is not attached yet.
    ``batch.balance`` deals each step here as a local run does, with ``batch.pack`` and a
    window too (each worker plans every step's rows as every rank does and computes the
    asking rank's rows' samples; the rank lays them out by its own plan).
    ``lease_s``: the pool (coordinator and workers) ends when no rank was heard from for
    this many seconds (default 60): each rank's loader renews it every ``lease_s / 4`` from
    a thread while it is open, so only ranks that died (a SIGKILLed trainer) let it run
    out, and their CPUs and custom resources return to the cluster. The rank that starts
    the pool sets it.
    """

    def __init__(self, pipeline: Union[Pipeline, str, os.PathLike], rank: Optional[int] = None,
                 world_size: Optional[int] = None, workers: int = 4, placement: str = "spread",
                 worker_resources: Optional[Dict[str, float]] = None,
                 min_workers: Optional[int] = None, max_workers: Optional[int] = None,
                 prefetch: Optional[int] = None, name: Optional[str] = None,
                 address: Optional[str] = None, journal: Optional[str] = None,
                 target_wait_time_ratio: float = 0.1,
                 state_dict: Optional[Dict[str, Any]] = None,
                 metrics_port: Union[int, str, None] = None,
                 metrics_labels: Optional[Dict[str, str]] = None,
                 lease_s: float = DEFAULT_LEASE_S):
        if isinstance(lease_s, bool) or not isinstance(lease_s, (int, float)) or \
                not 1 <= lease_s <= 86400:
            raise _headrace.ConfigError(
                f"lease_s must be a number of seconds in [1, 86400], got {lease_s!r}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise _headrace.ConfigError(f"workers must be an int >= 1, got {workers!r}")
        if placement not in PLACEMENTS:
            raise _headrace.ConfigError(
                f"placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
        lo = 1 if min_workers is None else min_workers
        hi = workers if max_workers is None else max_workers
        if not 1 <= lo <= hi or not lo <= workers <= hi:
            raise _headrace.ConfigError(
                f"workers: need 1 <= min_workers <= workers <= max_workers, got min_workers "
                f"{min_workers!r}, workers {workers}, max_workers {max_workers!r}")
        if prefetch is not None and (not isinstance(prefetch, int) or prefetch < 1):
            raise _headrace.ConfigError(f"prefetch must be an int >= 1, got {prefetch!r}")
        resources = dict({"CPU": 2} if worker_resources is None else worker_resources)
        _connect(address)
        _check_resources(resources)
        if rank is None and world_size is None:
            found = _train_context()
            if found is not None:
                rank, world_size = found
        self._ray_options = {"workers": workers, "placement": placement,
                             "worker_resources": resources}
        self._autoscale = (min_workers is not None or max_workers is not None, lo, hi)
        self._target_ratio = float(target_wait_time_ratio)
        self._prefetch = prefetch
        self._journal = journal
        self._lease_s = float(lease_s)
        self._coordinator = None
        self._heartbeat: Optional[_Heartbeat] = None
        self._last_pool: Dict[str, Any] = {}
        self._orphans: Dict[int, Any] = {}  # batch k -> (worker, ref) no stream consumes
        self._run_info: Optional[Dict[str, Any]] = None
        super().__init__(pipeline, rank=rank, world_size=world_size,
                         metrics_port=metrics_port, metrics_labels=metrics_labels)
        # What a worker's run would refuse (batch.balance's parts that need the rank's own
        # run), refused here, before a worker starts.
        self._prepared_pipeline().check_on_demand(self.world_size)
        # The workers' endpoints: same host, ports after the ranks' (ray/_metrics.py).
        self._worker_metrics = None
        if metrics_port is not None:
            host, base = _listen_address(metrics_port)
            self._worker_metrics = (host, base, self.world_size)
        if name is None:
            name = (f"run-{uuid.uuid4().hex[:12]}" if self.world_size == 1 else
                    f"{self._fingerprint}-w{self.world_size}")
        self.name = name
        self._start_pool()
        if state_dict is not None:
            self.load_state_dict(state_dict)

    # --- the pool ------------------------------------------------------------------------

    def _start_pool(self) -> None:
        if self._coordinator is not None:
            return
        ray = _ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        journal = self._journal or os.path.join(tempfile.gettempdir(), "headrace-ray",
                                                f"{self.name}.jsonl")
        # On this node (its journal is a local file), restarted by Ray after a crash; its
        # calls are retried across a restart. Detached: it outlives the rank that made it
        # while other ranks use it; the last rank to close stops it.
        here = ray.get_runtime_context().get_node_id()
        self._coordinator = ray.remote(Coordinator).options(
            name=f"headrace-{self.name}", namespace="headrace", get_if_exists=True,
            lifetime="detached", num_cpus=0, max_restarts=-1, max_task_retries=-1,
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False),
        ).remote(self.name, self.pipeline, self._ray_options["workers"],
                 self._ray_options["placement"], self._ray_options["worker_resources"],
                 os.getcwd(), journal, self._worker_metrics, self._lease_s, self.world_size)
        ray.get(self._coordinator.attach.remote(self.rank))
        self._heartbeat = _Heartbeat(self._coordinator, self.rank, self._lease_s)
        self._run_info = ray.get(self._coordinator.info.remote())

    def scale(self, n: int) -> None:
        """Resizes the pool to ``n`` workers while training runs: new workers take new
        batches as soon as they start; surplus ones stop after delivering theirs."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise _headrace.ConfigError(f"scale: n must be an int >= 1, got {n!r}")
        if self._autoscale[0] and not self._autoscale[1] <= n <= self._autoscale[2]:
            raise _headrace.ConfigError(
                f"scale: {n} is outside [min_workers, max_workers] = "
                f"[{self._autoscale[1]}, {self._autoscale[2]}]")
        self._start_pool()
        _ray().get(self._coordinator.scale.remote(n))

    def _maybe_autoscale(self, stream: _Stream) -> None:
        on, lo, hi = self._autoscale
        if not on or self.rank != 0 or stream._clock.stats()["batches"] % 8 != 0:
            return
        ratio, batches = stream.window_wait_ratio()
        if batches == 0:
            return
        n = stream._workers
        if ratio > self._target_ratio and n < hi:
            self.scale(n + 1)
        elif ratio < self._target_ratio / 4 and n > lo:
            self.scale(n - 1)

    def pool_stats(self) -> Dict[str, Any]:
        """The pool as the coordinator sees it: each worker's node, state and load,
        reassignments, coordinator restarts, each rank's journaled position. After
        ``close()`` (and at the end of the run), the last figures seen."""
        if self._coordinator is not None:
            self._last_pool = _ray().get(self._coordinator.stats.remote())
        return dict(self._last_pool)

    def stats(self) -> Dict[str, Any]:
        """This rank's wait accounting (as :meth:`headrace.Loader.stats`: wait_time_ratio,
        ...; also batches_per_s, bytes_moved, samples_failed), plus ``workers`` (each with
        its ``node_id``), ``reassignments`` and ``coordinator_restarts`` of the pool; for a
        blend, ``source.<name>.samples`` and ``.errors`` of this rank's batches (the local
        loader's keys; ``.bytes_read`` is counted by the workers only)."""
        out = dict(super().stats())
        pool = self.pool_stats()
        if pool:
            out.update(workers=pool["workers"], reassignments=pool["reassignments"],
                       worker_deaths=pool["worker_deaths"],
                       coordinator_restarts=pool["coordinator_restarts"])
        return out

    # --- metrics ------------------------------------------------------------------------

    def _metric_labels(self, extra: Optional[Dict[str, str]]) -> Dict[str, str]:
        labels = super()._metric_labels(extra)
        labels.update(node=node_address(), role="trainer")
        return labels

    def _start_metrics(self, metrics_port: Union[int, str], labels: Dict[str, str]):
        host, base = _listen_address(metrics_port)
        return RankMetrics(host, rank_port(base, self.rank), labels)

    def metrics_endpoints(self) -> Dict[str, Any]:
        """Where this run's metrics are: ``{"rank": this rank's URL, "workers": {worker
        id: URL}}`` (None where ``metrics_port`` was not given)."""
        pool = self.pool_stats()
        return {"rank": self.metrics_url,
                "workers": {w["worker"]: w.get("metrics_url") for w in pool.get("workers", [])}}

    # --- the engine headrace.Loader iterates -----------------------------------------------

    def _make_engine(self, epoch: int, batch: int):
        self._start_pool()
        if not self._spec.regroups:
            return _Stream(self, epoch, batch)
        # batch.pack: the workers compute the batches of samples as unpacked; this rank
        # packs them in order with the local loader's former, so the rows are its.
        return _PackedStream(self, epoch, batch)

    def _release_orphans(self, coord, keys: List[int]) -> None:
        """Drops the requests no stream consumed under ``keys``, telling the coordinator
        that they are no longer outstanding."""
        dropped = [(self._orphans.pop(k)[0], k) for k in keys if k in self._orphans]
        if dropped and coord is not None:
            try:
                coord.done.remote(self.rank, dropped, self._epoch, self._batch)
            except Exception:
                pass

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        super().load_state_dict(state)
        # Batches of an earlier elastic rest (k < 0) are another rest's: none is taken over.
        self._release_orphans(self._coordinator, [k for k in self._orphans if k < 0])

    def close(self) -> None:
        """Stops this rank's stream and detaches from the pool; the last rank to close
        stops the workers and the coordinator. Iterating again starts a new pool."""
        super().close()
        heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is not None:
            heartbeat.stop()
        coord, self._coordinator = self._coordinator, None
        if coord is None:
            return
        self._release_orphans(coord, list(self._orphans))
        ray = _ray()
        try:
            self._last_pool = ray.get(coord.stats.remote(), timeout=30)
            left = ray.get(coord.detach.remote(self.rank), timeout=30)
            if left == 0:
                ray.kill(coord, no_restart=True)
        except Exception:
            pass  # the cluster is gone already
