"""Loader: an iterable of batches, one epoch per ``for``, with exact resume (state_dict)."""
from __future__ import annotations

import atexit
import os
import sys
import weakref
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from . import _headrace
from .batch import Batch
from .pipeline import Pipeline

_STATE_VERSION = 2  # 1: a whole-run position (next_batch), before one epoch per `for`
_live: "weakref.WeakSet[Loader]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    # Stop engines before the interpreter goes: their threads may be waiting on the GIL.
    for loader in list(_live):
        loader.close()
        loader.close_metrics()


def _listen_address(value: Union[int, str]) -> Tuple[str, int]:
    """``metrics_port``'s value as (host, port): ``N`` or ``"HOST:N"``, N in 0..65535
    (0: any free port); the host defaults to 127.0.0.1 (this machine only)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _headrace.ConfigError(
            f"metrics_port: {value!r}: expected PORT or 'HOST:PORT' with PORT 0..65535 "
            "(0: any free port)")
    try:  # the rule `headrace run --metrics-port` applies (observe/metrics_server.h)
        return _headrace._parse_listen_address(str(value), "127.0.0.1")
    except _headrace.ConfigError as e:
        raise _headrace.ConfigError(f"metrics_port: {e}") from None


def default_rank_and_world_size(rank: Optional[int] = None,
                                world_size: Optional[int] = None) -> Tuple[int, int]:
    """This process's data-parallel rank and world size: an explicit argument wins, then
    ``torch.distributed`` when it is initialized, then ``RANK``/``WORLD_SIZE`` (torchrun
    sets both), else 0 and 1."""
    found: Optional[Tuple[int, int, str]] = None
    dist = sys.modules.get("torch.distributed")  # initialized implies imported
    if dist is not None and dist.is_available() and dist.is_initialized():
        found = (dist.get_rank(), dist.get_world_size(), "torch.distributed")
    else:
        env_rank, env_world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
        if env_rank is not None or env_world is not None:
            where = f"RANK={env_rank!r}, WORLD_SIZE={env_world!r}"
            if env_rank is None or env_world is None:
                raise _headrace.ConfigError(
                    f"environment: {where}: set both RANK and WORLD_SIZE (as torchrun does), "
                    "or neither")
            try:
                found = (int(env_rank), int(env_world), "environment")
            except ValueError:
                raise _headrace.ConfigError(
                    f"environment: {where}: both must be integers") from None
            if not 0 <= found[0] < found[1]:
                raise _headrace.ConfigError(
                    f"environment: {where}: RANK must be in [0, WORLD_SIZE)")
    source = "arguments"
    if rank is None or world_size is None:
        if found is not None:
            source = found[2] if rank is None and world_size is None else \
                f"arguments and {found[2]}"
            rank = found[0] if rank is None else rank
            world_size = found[1] if world_size is None else world_size
        else:
            rank = 0 if rank is None else rank
            world_size = 1 if world_size is None else world_size
    rank, world_size = int(rank), int(world_size)
    if world_size < 1 or not 0 <= rank < world_size:
        raise _headrace.ConfigError(
            f"rank must be in [0, world_size) (got rank {rank}, world_size {world_size}, "
            f"from {source})")
    return rank, world_size


class Loader:
    """The batches of ``pipeline`` for data-parallel ``rank`` of ``world_size``, one
    epoch per ``for``, as ``DataLoader`` with ``DistributedSampler`` gives them::

        for epoch in range(3):
            for batch in loader:   # epoch 0, then 1, then 2: each its own shuffle
                ...

    Each ``for`` is the next epoch (a loop left with ``break`` counts as its epoch);
    ``set_epoch(e)`` jumps to epoch ``e`` explicitly; ``len(loader)`` is this rank's
    batches per epoch. The pipeline's ``epochs`` limits the run (``None``/``null``:
    unbounded); ``run()`` iterates every remaining epoch in one loop.

    The engine computes ahead of the consumer on its own threads, across epoch
    boundaries (the next epoch's first batches are ready when an epoch ends); the GIL is
    released while it works and while the loop waits, and Ctrl-C interrupts a wait.

    ``rank``/``world_size`` default to ``torch.distributed``'s when it is initialized,
    else to the ``RANK``/``WORLD_SIZE`` environment (torchrun), else 0 and 1.

    ``state_dict()`` taken after a batch, given to ``load_state_dict`` (here or in a new
    process, with the same pipeline), continues that epoch at the next batch; the
    ``for`` after that one is the next epoch. Prefetched batches that were never
    consumed are simply computed again.

    ``pin_memory=True`` allocates batches in pinned (page-locked) host memory when a CUDA
    device is usable, so that ``.to("cuda", non_blocking=True)`` is asynchronous; on a
    CPU-only machine it is a no-op (``pinned`` says which happened).

    ``metrics_port=N`` serves the run's metrics in the Prometheus text format at
    ``http://HOST:N/metrics`` (``metrics_url``) while the loader lives: per-stage counters
    and busy/starved/blocked seconds, read and operator latency histograms, memory
    against the budget, samples and errors by kind, the wait-time ratio. ``0`` picks a
    free port. ``N`` listens on 127.0.0.1 only (this machine); for a Prometheus on
    another machine name the address: ``"0.0.0.0:N"`` (every interface) or
    ``"HOST:N"``. Every series carries ``rank`` and ``node`` labels, plus
    ``metrics_labels``. A new engine (a resume, ``set_epoch``) restarts the counters,
    which Prometheus' ``rate()`` treats as a counter reset.
    """

    def __init__(self, pipeline: Union[Pipeline, str, os.PathLike], rank: Optional[int] = None,
                 world_size: Optional[int] = None, pin_memory: bool = False,
                 state_dict: Optional[Dict[str, Any]] = None,
                 metrics_port: Union[int, str, None] = None,
                 metrics_labels: Optional[Dict[str, str]] = None):
        if not isinstance(pipeline, Pipeline):
            pipeline = Pipeline.from_yaml(pipeline)
        self.pipeline = pipeline
        self.rank, self.world_size = default_rank_and_world_size(rank, world_size)
        self.pinned = bool(pin_memory) and _headrace._pinned_available()
        self._spec = pipeline.spec()
        self._fingerprint = pipeline.fingerprint()
        self._fingerprint_elastic = pipeline.fingerprint(elastic=True)
        self._limit: Optional[int] = self._spec.epochs  # epochs of the run; None: unbounded
        self._impl = None
        self._prepared = None  # the pipeline prepared once, on the first engine
        # Where the consumer is: the epoch and the rank-local batch in it that come next.
        self._epoch = 0
        self._batch = 0
        self._per_epoch: Optional[int] = None  # this rank's batches per epoch, once known
        self._active = False  # a `for` over self._epoch started and has not ended
        self._keep = False    # the next `for` continues self._epoch (resume, set_epoch)
        # No batch was taken since the last iter(): another iter() is the same `for`. (CPython
        # 3.13.5's generator expressions call iter() twice on their outermost iterable;
        # 3.13.0's once: without this the second skipped to the next epoch.)
        self._fresh = False
        self._last_stats: Optional[Dict[str, float]] = None
        self._last_report: Optional[str] = None  # the last engine's, once it stopped
        # batch.pack: the packer's saved window (load_state_dict), for the engine made at
        # its position; the engine's own once it runs.
        self._pack_state: Optional[Dict[str, Any]] = None
        # An elastic resume (merge_state_dicts): the rest of one epoch, {epoch, consumed,
        # pending}, that this loader's ranks share; and a blend's picks before it when
        # its weights changed. Both end with that epoch.
        self._remainder: Optional[Dict[str, Any]] = None
        self._blend_start: Optional[List[int]] = None
        self._impl_rest = False  # whether self._impl runs the remainder
        self._metrics = None
        if metrics_port is not None:
            # Bound now: a port in use fails here, before any work.
            self._metrics = self._start_metrics(metrics_port, self._metric_labels(metrics_labels))
        _live.add(self)
        if state_dict is not None:
            self.load_state_dict(state_dict)

    # --- iteration -------------------------------------------------------------------

    def __iter__(self) -> "Loader":
        """Starts the next epoch (or continues the one a state dict or ``set_epoch`` set)."""
        if self._active and not self._keep and not self._fresh:
            self._epoch, self._batch = self._epoch + 1, 0  # the last `for` left its epoch early
        self._keep = False
        self._check_epoch(self._epoch, "epoch")
        self._active = self._fresh = True
        return self

    def __next__(self) -> Batch:
        if not self._active:
            self.__iter__()  # next(loader) without a `for`
        per_epoch = self._batches_per_epoch()
        while True:
            if self._batch >= per_epoch:
                self._end_epoch()
            impl = self._engine()
            item = impl.next()
            if item is None:  # the end of the run
                self._end_epoch()
            self._batch = impl.next_batch - self._epoch * per_epoch
            fields, epoch, index, global_index, errors, ptrs = item
            # A batch whose samples all failed comes empty (its errors are counted in the
            # report): it holds the position, and the loop goes on to the next one.
            if len(fields["index"]) > 0:
                self._fresh = False
                return Batch(fields, epoch, index, global_index, errors, ptrs)

    def end_epoch(self) -> None:
        """Ends the epoch being iterated now: its remaining batches are skipped, and the
        next ``for`` (and a state dict taken from now on) starts the next epoch. What
        :class:`headrace.torch.TorchLoader` does with ``even_steps`` when another rank ran
        out of batches first. Nothing when no epoch is being iterated."""
        if not self._active:
            return
        try:
            self._end_epoch()
        except StopIteration:
            pass

    def _end_epoch(self):
        self._epoch, self._batch, self._active = self._epoch + 1, 0, False
        if self._limit is not None and self._epoch >= self._limit:
            self.close()  # the run is over: free the engine's threads and memory
        raise StopIteration

    def run(self) -> Iterator[Batch]:
        """Every remaining batch of the run, epoch after epoch, in one loop (what
        ``headrace run`` consumes). Endless when the pipeline's epochs is unbounded."""
        while self._limit is None or self._epoch < self._limit:
            yield from self

    def set_epoch(self, epoch: int) -> None:
        """Makes the next ``for`` iterate ``epoch``, from its first batch, as
        ``DistributedSampler.set_epoch`` does. The epoch the loader is already positioned
        in (after ``load_state_dict``, or the one the next ``for`` would start anyway)
        keeps its position, so the usual ``set_epoch(e)`` before each ``for`` never
        undoes a resume or stalls the prefetch."""
        if isinstance(epoch, bool) or not isinstance(epoch, int):
            raise _headrace.ConfigError(f"set_epoch: epoch must be an int, got {epoch!r}")
        self._check_epoch(epoch, "set_epoch")
        if epoch == self._epoch and not self._active:
            self._keep = True
            return
        self._epoch, self._batch, self._active, self._keep = epoch, 0, False, True

    @property
    def epoch(self) -> int:
        """The epoch the current (or next) ``for`` iterates."""
        return self._epoch

    def _check_epoch(self, epoch: int, what: str) -> None:
        if epoch < 0 or (self._limit is not None and epoch >= self._limit):
            allowed = (f"[0, {self._limit})" if self._limit is not None else ">= 0")
            raise _headrace.ConfigError(
                f"{what}: epoch {epoch} is outside the run (allowed: {allowed}; the pipeline's "
                f"epochs is {self._limit if self._limit is not None else 'null (unbounded)'}"
                "; set epochs to null for a run without an end)")

    def _engine(self):
        """The engine, positioned at the consumer's (epoch, batch): the running one when it
        is there already, so that prefetch carries over from one epoch to the next."""
        rest = self._in_remainder()
        if self._impl is not None and self._impl_rest == rest:
            per = self._impl.batches_per_epoch if rest else self._per_epoch
            if per is not None and self._impl.next_batch == self._epoch * per + self._batch:
                return self._impl
        self._stop_engine()
        impl = self._make_engine(self._epoch, self._batch)
        if not rest:  # the rest of an epoch has batches of its own
            if self._per_epoch is not None and impl.batches_per_epoch != self._per_epoch:
                mine = impl.batches_per_epoch  # a closed engine answers nothing
                impl.close()
                raise _headrace.ConfigError(
                    f"state dict: batches_per_epoch: saved {self._per_epoch}, this loader "
                    f"{mine} (the dataset changed)")
            self._per_epoch = impl.batches_per_epoch
        self._impl, self._impl_rest = impl, rest
        if self._metrics is not None:
            self._metrics.attach(impl)
        return impl

    def _make_engine(self, epoch: int, batch: int):
        """A new engine that delivers this rank's batches from (epoch, batch) on, with
        ``next()``, ``next_batch``, ``batches_per_epoch``, ``consumer_stats()``,
        ``report_json()`` and ``close()`` (headrace.ray's stream has the same). It runs
        the pipeline prepared once for this loader (its source opened, its ops built), so
        a reposition reads no index and loads no model again."""
        pack = self._pack_state
        if pack is not None and (pack.get("epoch"), pack.get("next_batch")) != (epoch, batch):
            pack = None  # another position: the engine replays its epoch up to `batch`
        rest = self._remainder if self._in_remainder() else None
        return self._prepared_pipeline().run(
            self.rank, self.world_size, epoch, batch, self.pinned, pack_state=pack,
            remainder=rest, blend_start=self._blend_start if rest else None)

    def _prepared_pipeline(self):
        """The pipeline prepared once for this loader (pipeline/prepared.h), on first use."""
        if self._prepared is None:
            self._prepared = _headrace._Prepared.make(self._spec)
        return self._prepared

    def _in_remainder(self) -> bool:
        """Whether the epoch iterated now is the rest of an epoch (an elastic resume)."""
        if self._remainder is not None and self._epoch != self._remainder["epoch"]:
            self._remainder = self._blend_start = None  # that epoch is over
        return self._remainder is not None

    def _batches_per_epoch(self) -> int:
        if self._in_remainder():
            return self._engine().batches_per_epoch
        if self._per_epoch is None:
            self._engine()
        return self._per_epoch

    def __len__(self) -> int:
        """This rank's batches per epoch (as ``len(DataLoader)``)."""
        return self._batches_per_epoch()

    @property
    def batches_per_epoch(self) -> int:
        """This rank's batches per epoch."""
        return self._batches_per_epoch()

    # --- resume ----------------------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """Where the consumer is: the epoch and the batch in it that come next, and what
        pipeline they belong to."""
        spec = self._spec
        return {
            "version": _STATE_VERSION,
            "fingerprint": self._fingerprint,
            "manifest": spec.manifest,
            "seed": spec.seed,
            "batch_size": spec.batch_size,
            "shuffle": spec.shuffle,
            "drop_last": spec.drop_last,
            "ops": list(spec.op_names),
            "batch_ops": list(spec.batch_op_names),
            "rank": self.rank,
            "world_size": self.world_size,
            "epoch": self._epoch,
            "batch_in_epoch": self._batch,
            "batches_per_epoch": self._per_epoch,
            # batch.pack: the samples waiting in the packer's window (dataset indices) and
            # the batch the oldest came from, so that a resume rebuilds the same rows.
            "pack": self._packer_state(),
            # An elastic resume's epoch: the rest of it this run's ranks share (its batches
            # are counted within it), and a blend's picks before it.
            "remainder": dict(self._remainder) if self._in_remainder() else None,
            "blend_start": list(self._blend_start) if self._in_remainder() and
            self._blend_start is not None else None,
            # What an elastic resume compares (the fingerprint without the batch size and
            # a blend's weights), and for a blend (source.mix) its weights and each entry's
            # picks before the position all ranks reached (batch_in_epoch x world_size x
            # batch_size), so that a resume with new weights continues each entry there.
            "fingerprint_elastic": self._fingerprint_elastic,
            "mix_weights": list(self._spec.mix_weights) if self._spec.is_mix else None,
            "blend_picks": self._blend_picks(),
        }

    def _blend_picks(self) -> Optional[List[int]]:
        if not self._spec.is_mix:
            return None
        rest = self._remainder if self._in_remainder() else None
        positions = _headrace._positions_consumed(self._batch, self.world_size,
                                                  self._spec.batch_size)
        return list(self._prepared_pipeline().blend_picks(
            self._epoch, positions, remainder=rest,
            blend_start=self._blend_start if rest else None))

    def _packer_state(self) -> Optional[Dict[str, Any]]:
        if self._impl is not None and hasattr(self._impl, "pack_state"):
            state = self._impl.pack_state()
            if state is not None:
                self._pack_state = state
        return dict(self._pack_state) if self._pack_state is not None else None

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Resume where ``state`` was taken: the next ``for`` continues its epoch at the
        next batch. Refused, naming what differs, when it comes from another pipeline,
        seed, rank or world size, or from an older headrace; and, naming the key and what
        is allowed, when it claims what it cannot be (a position outside the epoch, a
        batches_per_epoch that is not this pipeline's, a pack window or pending samples
        that repeat a sample, a value of the wrong type: pipeline/run_position.h)."""
        if not isinstance(state, dict) or "version" not in state:
            raise _headrace.ConfigError(
                f"state dict: not a headrace Loader state (version {_STATE_VERSION} expected)")
        if state["version"] != _STATE_VERSION:
            raise _headrace.ConfigError(
                f"state dict: version: saved {state['version']!r}, this loader "
                f"{_STATE_VERSION}: version 1 held a position in the whole run (next_batch "
                f"{state.get('next_batch')!r}), version 2 holds epoch and batch_in_epoch, "
                "since each `for` is one epoch; resume from a checkpoint written by this "
                "version")
        mine = self.state_dict()
        weights_changed = state.get("mix_weights") != mine["mix_weights"]
        elastic = (state.get("kind") == "global" or weights_changed or
                   state.get("world_size") != self.world_size or
                   state.get("batch_size") != mine["batch_size"])
        differences: List[str] = []
        for key in ("seed", "batch_size", "shuffle", "drop_last", "manifest", "ops",
                    "batch_ops", "rank", "world_size"):
            if elastic and key in ("batch_size", "rank", "world_size"):
                continue  # the rest of the epoch is dealt to this run's ranks and batches
            saved = state.get(key)
            if saved != mine[key]:
                differences.append(f"{key}: saved {saved!r}, this loader {mine[key]!r}")
        key = "fingerprint_elastic" if elastic else "fingerprint"
        if not differences and state.get(key) != mine[key]:
            differences.append("pipeline: the saved pipeline differs in an op's parameters or "
                               "the source's fields (fingerprint "
                               f"{state.get(key)} vs {mine[key]})")
        if differences:
            raise _headrace.ConfigError(
                "state dict from a different pipeline: " + "; ".join(differences))
        if elastic:
            self._load_global(state if state.get("kind") == "global"
                              else _merge([state], lockstep=True), weights_changed)
            return
        # What the state claims (types, sizes, its position inside the epoch, the pack
        # window, the rest of an epoch, a blend's picks) against this pipeline
        # (pipeline/run_position.h).
        self._prepared_pipeline().check_state(state)
        epoch, batch = state["epoch"], state["batch_in_epoch"]
        per_epoch = state.get("batches_per_epoch")
        self._check_epoch(epoch, "state dict")
        self._stop_engine()
        self._epoch, self._batch, self._per_epoch = epoch, batch, per_epoch
        self._pack_state = state.get("pack")
        self._remainder = state.get("remainder")
        self._blend_start = state.get("blend_start")
        self._active, self._keep = False, True

    def _load_global(self, state: Dict[str, Any], weights_changed: bool) -> None:
        """A global state (merge_state_dicts): the rest of its epoch, dealt to this
        loader's ranks and batch size; a blend whose weights changed continues each entry
        at its picks."""
        if weights_changed:  # its order was another's: checked on its own
            _headrace._check_state(state)
        else:
            self._prepared_pipeline().check_state(state)
        epoch = state["epoch"]
        self._check_epoch(epoch, "state dict")
        rest = state.get("remainder")
        start = state.get("blend_start")
        if rest is not None and weights_changed:
            if state.get("blend_picks") is None:
                raise _headrace.ConfigError(
                    "state dict: blend_picks is missing: a resume with other weights needs "
                    "the picks each source.mix entry had made (saved by this version)")
            # Every pick before the position is in blend_picks; the pending samples stay.
            rest = {"epoch": epoch, "consumed": 0, "pending": list(rest["pending"])}
            start = list(state["blend_picks"])
        self._stop_engine()
        self._epoch, self._batch, self._per_epoch = epoch, 0, None
        self._pack_state = None
        self._remainder, self._blend_start = rest, start
        self._active, self._keep = False, True

    # --- measurement and lifetime ----------------------------------------------------

    def stats(self) -> Dict[str, float]:
        """The consumer's wait accounting so far (seconds) and its ``wait_time_ratio``;
        ``samples_failed`` and ``errors.<kind>`` (as the report counts them); with
        batch.pack also what packing did: ``pack_fill`` (real tokens / rows x seq_len),
        ``pack_padding_tokens``, ``pack_vision_tokens``, ``pack_truncated``,
        ``pack_skipped``, ... (the truncated and skipped samples are data lost: also in
        ``errors.pack_truncated`` and ``errors.pack_skipped``, against
        errors.max_error_rate); with batch.balance the steps dealt by cost so far:
        ``balance.steps``, ``balance.slowest_rank_cost``, ``balance.mean_rank_cost`` and
        ``balance.slowest_rank_cost_order`` (the slowest rank as the order would have
        dealt the steps), ``balance.untold`` (samples costed the mean)."""
        if self._impl is None:
            if self._last_stats is not None:
                return dict(self._last_stats)
            return {"batches": 0, "samples": 0, "time_to_first_batch_s": 0.0, "wait_s": 0.0,
                    "busy_s": 0.0, "steady_s": 0.0, "elapsed_s": 0.0, "wait_time_ratio": 0.0}
        return self._impl.consumer_stats()

    @property
    def wait_time_ratio(self) -> float:
        """Time waiting for batches / time since the first batch (cold start apart)."""
        return self.stats()["wait_time_ratio"]

    def report(self) -> Dict[str, Any]:
        """The run report (as ``headrace run`` writes it) of the current engine, or, once
        it stopped (a bounded run's last epoch ended, ``close()``, a reposition), of the
        last one, as it stood then."""
        import json
        if self._impl is None:
            if self._last_report is not None:
                return json.loads(self._last_report)
            raise _headrace.Error("report(): no engine has run yet")
        return json.loads(self._impl.report_json())

    def close(self) -> None:
        """Stops the engine and lets go of the prepared pipeline (its source's index and
        cache, its operators); batches already handed out stay valid. The position is
        kept: iterating again prepares the pipeline again and starts there."""
        self._stop_engine()
        self._prepared = None

    def _stop_engine(self) -> None:
        """Stops the engine that serves the current position (repositioning, resume);
        ``close()`` is this plus whatever else a subclass holds (headrace.ray's workers)."""
        impl, self._impl = self._impl, None
        if impl is not None:
            self._last_stats = impl.consumer_stats()
            try:
                self._last_report = impl.report_json()  # report() after the run
            except Exception:  # a stream whose coordinator is gone (headrace.ray)
                self._last_report = None
            if self._metrics is not None:
                self._metrics.attach(None)  # keeps serving this engine's final values
            impl.close()

    # --- metrics endpoint -------------------------------------------------------------

    @property
    def metrics_url(self) -> Optional[str]:
        """``http://HOST:PORT/metrics`` when ``metrics_port`` was given, else None."""
        return self._metrics.url if self._metrics is not None else None

    def _metric_labels(self, extra: Optional[Dict[str, str]]) -> Dict[str, str]:
        import socket
        labels = {"node": socket.gethostname(), "rank": str(self.rank)}
        for key, value in (extra or {}).items():
            if not isinstance(key, str) or not key.replace("_", "a").isalnum() or \
                    key[0].isdigit():
                raise _headrace.ConfigError(
                    f"metrics_labels: {key!r} is not a Prometheus label name "
                    "([a-zA-Z_][a-zA-Z0-9_]*)")
            labels[key] = str(value)
        return labels

    def _start_metrics(self, metrics_port: Union[int, str], labels: Dict[str, str]):
        host, port = _listen_address(metrics_port)
        return _headrace._MetricsServer(host, port, labels)

    def close_metrics(self) -> None:
        """Stops the metrics endpoint (``with`` and garbage collection do it too)."""
        metrics, self._metrics = self._metrics, None
        if metrics is not None:
            metrics.close()

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
        self.close_metrics()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


_SAME_IN_EVERY_RANK = ("fingerprint", "seed", "batch_size", "shuffle", "drop_last", "manifest",
                       "ops", "batch_ops", "world_size", "epoch", "batch_in_epoch",
                       "remainder", "blend_start", "blend_picks")


def merge_state_dicts(states: List[Dict[str, Any]]) -> Dict[str, Any]:
    """One global state from every rank's ``Loader.state_dict()`` (taken at the same step,
    as a data-parallel trainer checkpoints): the rest of the epoch, which a loader with
    any world size (and batch size) loads with ``load_state_dict``, each of its ranks
    taking its share; the next epochs are as a run started with that world size.

    The rest is the epoch's order after the position every rank reached (batch_in_epoch x
    world_size x batch_size samples), after the samples that packers held in their
    windows (batch.pack: taken from the epoch's order, not yet delivered; a window every
    rank shares, batch.balance with a packing window, once). Over the whole
    epoch every sample is delivered once, except, as in every epoch, the last batches that
    do not make a full round of the new ranks. A blend's state also carries each entry's
    picks, so that a resume with new weights continues every entry where it was."""
    return _merge(states, lockstep=False)


def _merge(states: List[Dict[str, Any]], lockstep: bool) -> Dict[str, Any]:
    if not isinstance(states, (list, tuple)) or not states:
        raise _headrace.ConfigError("merge_state_dicts: expected a list of state dicts, "
                                    f"one per rank, got {states!r}")
    for i, s in enumerate(states):
        if not isinstance(s, dict) or s.get("version") != _STATE_VERSION:
            raise _headrace.ConfigError(
                f"merge_state_dicts: states[{i}] is not a headrace Loader state of version "
                f"{_STATE_VERSION}")
        if s.get("kind") == "global":
            raise _headrace.ConfigError(
                f"merge_state_dicts: states[{i}] is global already: load it as it is")
    for i, s in enumerate(states):  # what each claims, named by its key (C++)
        try:
            _headrace._check_state(s)
        except _headrace.ConfigError as e:
            if lockstep:  # one state, loaded with another world or batch size
                raise
            raise _headrace.ConfigError(f"merge_state_dicts: states[{i}]: {e}") from None
    first = min(states, key=lambda s: s["rank"])
    for s in states:
        for key in _SAME_IN_EVERY_RANK:
            if s.get(key) != first.get(key):
                what = ("take every rank's state at the same step"
                        if key in ("epoch", "batch_in_epoch") else "states of one run")
                raise _headrace.ConfigError(
                    f"merge_state_dicts: {key}: rank {s.get('rank')} has {s.get(key)!r}, rank "
                    f"{first.get('rank')} {first.get(key)!r} ({what})")
    # Where the ranks leave the run: the rank set, the pack windows and the positions
    # consumed (pipeline/run_position.h, MergeLoaderStates).
    epoch, remainder, world = _headrace._merge_states(list(states), lockstep)
    merged = {k: first.get(k) for k in ("version", "fingerprint", "fingerprint_elastic",
                                        "mix_weights",
                                        "manifest", "seed", "batch_size", "shuffle",
                                        "drop_last", "ops", "batch_ops", "blend_picks")}
    merged.update({"kind": "global", "rank": None, "world_size": None,
                   "saved_world_size": world, "blend_start": first.get("blend_start")})
    if remainder is None:
        # Every rank finished its share: the rest of the epoch is the tail no round of
        # ranks took; the resume starts the next epoch.
        merged.update({"epoch": epoch, "remainder": None, "blend_start": None,
                       "blend_picks": None})
        return merged
    merged.update({"epoch": epoch, "remainder": remainder})
    return merged
