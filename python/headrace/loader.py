"""Loader: an iterable of batches with exact mid-run resume (state_dict)."""
from __future__ import annotations

import atexit
import os
import weakref
from typing import Any, Dict, Iterator, List, Optional, Union

from . import _headrace
from .pipeline import Pipeline

_STATE_VERSION = 1
_live: "weakref.WeakSet[Loader]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    # Stop engines before the interpreter goes: their threads may be waiting on the GIL.
    for loader in list(_live):
        loader.close()


class Batch(dict):
    """A batch: ``{field: tensor}``.

    Delivered batches hold :class:`headrace.Tensor`s: views of the engine's memory with
    ``__dlpack__``, ``__dlpack_device__``, the buffer protocol, ``shape``, ``dtype`` and
    ``len()`` (use ``torch.from_dlpack(t)`` or ``numpy.asarray(t)``: no copy; the memory
    stays valid as long as any view of it exists). Inside a ``map_batch`` function they
    are writable numpy views instead. Also: ``epoch``, ``index`` (in the epoch, over all
    ranks), ``global_index``, ``errors`` (skipped samples, ``epoch E, index I, URI:
    kind: reason``), ``data_ptrs`` (each field's address in the engine) and ``seed``
    (the batch's random seed, for ``map_batch`` functions; None on delivered batches)."""

    __slots__ = ("epoch", "index", "global_index", "errors", "data_ptrs", "seed")

    def __init__(self, fields, epoch=0, index=0, global_index=0, errors=(), data_ptrs=None,
                 seed=None):
        super().__init__(fields)
        self.epoch = epoch
        self.index = index
        self.global_index = global_index
        self.errors = list(errors)
        self.data_ptrs = dict(data_ptrs or {})
        self.seed = seed

    def __repr__(self) -> str:
        shapes = {k: tuple(getattr(v, "shape", ())) for k, v in self.items()}
        return f"Batch(epoch={self.epoch}, index={self.index}, fields={shapes})"


class _BatchCall:
    """What the engine calls for a ``map_batch`` op, on its own thread: hands the user's
    function a :class:`Batch` of writable numpy views (see batch_op.cc)."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, fields, epoch, index, global_index, seed):
        return self.fn(Batch(fields, epoch, index, global_index, seed=seed))


class Loader:
    """The batches of ``pipeline`` for data-parallel ``rank`` of ``world_size``.

    Iterating yields the rest of the run (every epoch of the pipeline, in order); once
    exhausted, iterating again starts a new run. The engine computes ahead of the
    consumer on its own threads; the GIL is released while it works and while the loop
    waits for a batch.

    ``state_dict()`` after batch k, given to ``load_state_dict`` (here or in another
    process, with the same pipeline), resumes at batch k + 1 exactly: batches that were
    prefetched but not consumed are simply computed again.

    ``pin_memory=True`` allocates batches in pinned (page-locked) host memory when a CUDA
    device is usable, so that ``.to("cuda", non_blocking=True)`` is asynchronous; on a
    CPU-only machine it is a no-op (``pinned`` says which happened).
    """

    def __init__(self, pipeline: Union[Pipeline, str, os.PathLike], rank: int = 0,
                 world_size: int = 1, pin_memory: bool = False,
                 state_dict: Optional[Dict[str, Any]] = None):
        if not isinstance(pipeline, Pipeline):
            pipeline = Pipeline.from_yaml(pipeline)
        self.pipeline = pipeline
        self.rank = int(rank)
        self.world_size = int(world_size)
        if not 0 <= self.rank < self.world_size:
            raise _headrace.ConfigError(
                f"rank must be in [0, world_size) (got rank {rank}, world_size {world_size})")
        self.pinned = bool(pin_memory) and _headrace._pinned_available()
        self._spec = pipeline.spec()
        self._fingerprint = pipeline.fingerprint()
        self._impl = None
        self._start = 0       # where the next engine starts
        self._next_batch = 0  # the rank-local batch the consumer gets next
        self._finished = False
        self._last_stats: Optional[Dict[str, float]] = None
        _live.add(self)
        if state_dict is not None:
            self.load_state_dict(state_dict)

    # --- iteration -------------------------------------------------------------------

    def __iter__(self) -> Iterator[Batch]:
        if self._finished:  # a new run
            self._finished = False
            self._start = self._next_batch = 0
        return self

    def __next__(self) -> Batch:
        if self._finished:
            raise StopIteration
        impl = self._engine()
        item = impl.next()
        if item is None:
            self._finished = True
            self._next_batch = impl.next_batch
            self.close()
            raise StopIteration
        fields, epoch, index, global_index, errors, ptrs = item
        batch = Batch(fields, epoch, index, global_index, errors, ptrs)
        self._next_batch = impl.next_batch
        return batch

    def _engine(self):
        if self._impl is None:
            self._impl = _headrace._Loader.make(self._spec, self.rank, self.world_size,
                                                self._start, self.pinned)
        return self._impl

    def __len__(self) -> int:
        """Batches of the whole run for this rank (every epoch)."""
        return self._engine().total_batches

    @property
    def batches_per_epoch(self) -> int:
        """This rank's batches per epoch."""
        return self._engine().batches_per_epoch

    # --- resume ----------------------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """Where the consumer is: the next batch it would get, and what that means."""
        spec = self._spec
        return {
            "version": _STATE_VERSION,
            "fingerprint": self._fingerprint,
            "manifest": spec.manifest,
            "seed": spec.seed,
            "batch_size": spec.batch_size,
            "epochs": spec.epochs,
            "shuffle": spec.shuffle,
            "drop_last": spec.drop_last,
            "ops": list(spec.op_names),
            "batch_ops": list(spec.batch_op_names),
            "rank": self.rank,
            "world_size": self.world_size,
            "next_batch": self._next_batch,
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Resume where ``state`` was taken. Refused, naming what differs, when it comes
        from another pipeline, seed, rank or world size."""
        if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
            raise _headrace.ConfigError(
                f"state dict: not a headrace Loader state (version {_STATE_VERSION} expected)")
        mine = self.state_dict()
        differences: List[str] = []
        for key in ("seed", "batch_size", "epochs", "shuffle", "drop_last", "manifest", "ops",
                    "batch_ops", "rank", "world_size"):
            saved = state.get(key, [] if key == "batch_ops" else None)
            if saved != mine[key]:
                differences.append(f"{key}: saved {saved!r}, this loader {mine[key]!r}")
        if not differences and state.get("fingerprint") != mine["fingerprint"]:
            differences.append("pipeline: the saved pipeline differs in an op's parameters or "
                               "the source's fields (fingerprint "
                               f"{state.get('fingerprint')} vs {mine['fingerprint']})")
        if differences:
            raise _headrace.ConfigError(
                "state dict from a different pipeline: " + "; ".join(differences))
        next_batch = state.get("next_batch")
        if not isinstance(next_batch, int) or next_batch < 0:
            raise _headrace.ConfigError(f"state dict: next_batch must be an int >= 0 "
                                        f"(got {next_batch!r})")
        self.close()
        self._start = self._next_batch = next_batch
        self._finished = False

    # --- measurement and lifetime ----------------------------------------------------

    def stats(self) -> Dict[str, float]:
        """The consumer's wait accounting so far (seconds) and its ``wait_time_ratio``."""
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
        """The run report (as ``headrace run`` writes it) of the current engine."""
        import json
        if self._impl is None:
            raise _headrace.Error("report(): no engine is running (the run ended or was closed)")
        return json.loads(self._impl.report_json())

    def close(self) -> None:
        """Stops the engine (batches already handed out stay valid)."""
        impl, self._impl = self._impl, None
        if impl is not None:
            self._last_stats = impl.consumer_stats()
            if not self._finished:
                self._start = self._next_batch
            impl.close()

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
