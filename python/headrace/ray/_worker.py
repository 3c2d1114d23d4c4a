"""The worker actor: one C++ engine in on-demand mode, answering ``get_batch(k)``.

A threaded actor (``max_concurrency``): each pending call is a thread that submits its
batch to the engine and waits for it without the GIL, so one worker serves many calls
while its engine computes. The batch is the call's return value: Ray copies it once into
the object store of this node and the caller (the rank) owns it, so it outlives this
worker; nothing here ``ray.put``s.
"""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .. import _headrace
from ._metrics import start_worker_metrics


class Worker:
    """Computes run-wide batches by index (rank 0 of world size 1: batch k of the run is
    epoch k // batches_per_epoch, batch k % batches_per_epoch over all ranks)."""

    def __init__(self, worker_id: int, pipeline, cwd: str, cpu_threads: int, metrics=None,
                 world_size: int = 1):
        import ray
        # Relative paths in the pipeline (manifest, tokenizer) name the driver's folder; on
        # a node that has it (the same machine, a shared filesystem) they resolve there.
        if cwd and os.path.isdir(cwd):
            os.chdir(cwd)
        if pipeline.spec().cpu_threads == 0 and cpu_threads > 0:
            # "one per core" means the cores Ray gave this actor, not the whole machine's.
            pipeline = pipeline._copy()
            pipeline._overrides = list(pipeline._overrides) + [
                f"execution.cpu_threads={cpu_threads}"]
        self.worker_id = worker_id
        self.node_id = ray.get_runtime_context().get_node_id()
        # One engine for the worker's life, on demand (rank 0 of 1: batch k is the run-wide
        # index), over the pipeline prepared once.
        self._prepared = _headrace._Prepared.make(pipeline.spec())
        # batch.balance deals each step over the trainers' ranks, as each rank's local run
        # would (exec/balanced_former.cc): the worker is told how many there are.
        self._world_size = int(world_size)
        self._impl = self._prepared.run(0, 1, 0, 0, pinned=False, on_demand=True,
                                        balance_ranks=self._world_size)
        # An elastic resume's epoch (the rest of an epoch dealt to another rank count) has
        # batches of its own: an engine for that rest, made when a rank first asks, kept
        # while the ranks read it (its batch k is numbered -1 - run-wide index).
        self._rest_key: Optional[str] = None
        self._rest_impl = None
        # The engine's own Prometheus endpoint (``metrics``: host, base port, world size).
        self._metrics, self._metrics_url = start_worker_metrics(metrics, worker_id, self._impl)
        self._lock = threading.Lock()
        # Batches being computed, by index: a second call for one (a rank that moved on
        # and came back, its earlier request still running) shares the first one's result
        # instead of submitting it twice.
        self._inflight: Dict[int, Dict[str, Any]] = {}
        self._batches = 0
        self._bytes = 0
        self._busy_s = 0.0
        self._started = time.perf_counter()

    def info(self) -> Dict[str, Any]:
        """What this worker is and holds: node, run shape, the source's memory."""
        return {
            "worker": self.worker_id,
            "node_id": self.node_id,
            "pid": os.getpid(),
            "batches_per_epoch": self._impl.batches_per_epoch,  # over all ranks
            "num_samples": self._impl.num_samples,
            # The source's index on this process's heap (a manifest kept as lines: 4 bytes
            # a record), and the manifest's bytes mapped from the node's page cache (shared
            # by every worker of the node).
            "manifest_bytes": self._impl.manifest_bytes,
            "manifest_mapped_bytes": self._impl.manifest_mapped_bytes,
            # EpochOrder keeps one epoch's permutation: 4 bytes a sample.
            "order_bytes": self._impl.permutation_bytes,
            "cpus": os.cpu_count(),
            "metrics_url": self._metrics_url,
        }

    def get_batch(self, k: int, rest: Optional[Tuple[Dict[str, Any], Optional[List[int]]]] = None
                  ) -> Dict[str, Any]:
        """Batch k of the run, as numpy arrays (zero-copy views of the engine's memory
        until Ray serializes them into the object store: the one copy). With ``rest``
        ((remainder, blend_start) of an elastic resume), k < 0 is batch -1 - k of the run
        over that rest."""
        with self._lock:
            slot = self._inflight.get(k)
            first = slot is None
            if first:
                slot = self._inflight[k] = {"done": threading.Event(), "out": None,
                                            "error": None}
        if not first:
            slot["done"].wait()
            if slot["error"] is not None:
                raise slot["error"]
            return slot["out"]
        try:
            slot["out"] = self._compute(k, rest)
            return slot["out"]
        except BaseException as e:
            slot["error"] = e
            raise
        finally:
            with self._lock:
                del self._inflight[k]
            slot["done"].set()

    def _engine_for(self, rest):
        if rest is None:
            return self._impl
        key = json.dumps(rest, sort_keys=True)
        with self._lock:
            if key != self._rest_key:
                # One rest at a time: every rank of a pool resumes from the same global
                # state, so another rest means the earlier one's ranks have moved on.
                if self._rest_impl is not None:
                    self._rest_impl.close()
                remainder, blend_start = rest
                self._rest_impl = self._prepared.run(
                    0, 1, remainder["epoch"], 0, pinned=False, on_demand=True,
                    remainder=remainder, blend_start=blend_start,
                    balance_ranks=self._world_size)
                self._rest_key = key
            return self._rest_impl

    def _compute(self, k: int, rest=None) -> Dict[str, Any]:
        start = time.perf_counter()
        impl = self._engine_for(rest)
        if rest is not None:
            k = -1 - k
        impl.submit(k)
        (fields, epoch, index, _, errors, _), tally = impl.take(k, tally=True)
        out = {}
        nbytes = 0
        for name, value in fields.items():
            if isinstance(value, list):
                out[name] = value
            else:
                array = np.asarray(value)
                nbytes += array.nbytes
                out[name] = array
        with self._lock:
            self._batches += 1
            self._bytes += nbytes
            self._busy_s += time.perf_counter() - start
        return {"fields": out, "epoch": epoch, "index": index, "errors": list(errors),
                "tally": tally,
                "worker": self.worker_id, "node_id": self.node_id, "bytes": nbytes}

    def stats(self) -> Dict[str, Any]:
        with self._lock:
            return {"worker": self.worker_id, "node_id": self.node_id, "batches": self._batches,
                    "bytes": self._bytes, "uptime_s": time.perf_counter() - self._started}

    def close(self) -> None:
        """Cancels the engine: waiting calls fail with CancelledError."""
        if self._metrics is not None:
            self._metrics.attach(None)
        self._impl.close()
        if self._rest_impl is not None:
            self._rest_impl.close()
