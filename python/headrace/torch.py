"""PyTorch adapter: batches as ``torch.Tensor``s, optionally on a device.

    loader = headrace.torch.TorchLoader(pipeline, device="cuda")  # or "cpu" / None
    for epoch in range(epochs):
        for batch in loader:             # {"image": Tensor[B,3,224,224], "input_ids": ...}
            loss = model(batch["image"], batch["input_ids"])
            ...
    loader.wait_time_ratio               # at any time

On the host, each tensor is ``torch.from_dlpack`` of the engine's memory: no copy. With a
CUDA device the engine's decoders write batches straight into pinned host memory
(``pin_memory``, default on for CUDA; pooled by the engine, so no ``cudaHostAlloc`` or
``cudaFreeHost`` per batch), and the hand-off overlaps the trainer's step:

- batch k+1 (up to ``prefetch`` batches ahead) is copied host→device on a side CUDA
  stream while the trainer computes on batch k;
- the batch handed out is ready for the trainer's *current stream*: that stream waits on
  the copy's event (the host never waits for a copy), and its tensors are marked used
  by that stream (``record_stream``), so the caching allocator does not hand their
  memory to the next copy while the trainer still reads them;
- a host batch goes back to the engine's pool only once the copy that reads it has
  completed (an event recorded after the copy), never while the DMA still reads it.

With ``device`` None/"cpu" none of that happens (a no-op path).

wait-time ratio = (time waiting for the next batch + converting and starting its
transfer + ``h2d_s``) / time since the first batch was handed over, as DESIGN.md defines
it; the first batch's wait is reported apart (``stats()["time_to_first_batch_s"]``).
``h2d_s`` is the time the trainer's stream stood waiting for copies, measured on the GPU
with CUDA events (counted once they completed; ``torch.cuda.synchronize()`` first for an
exact figure).
"""
from __future__ import annotations

import collections
import os
import time
from typing import Any, Deque, Dict, Iterator, Optional, Tuple, Union

import torch

from . import _headrace
from .loader import Batch, Loader
from .pipeline import Pipeline

Tensors = Dict[str, Any]  # field -> torch.Tensor, or a list (ids, text fields)

# The keys of headrace.Loader.stats() that TorchLoader.stats() passes on: the data's
# counts (the wait accounting is TorchLoader's own).
_LOADER_KEYS = ("samples_failed", "errors.", "pack_", "source.")


class HostRelease:
    """Holds host batches until the copies that read them have completed.

    ``hold(event, batch)`` keeps ``batch`` (anything that keeps the engine's memory
    alive: its tensors) referenced until ``event.query()`` is True; ``poll()`` drops those
    whose event completed, oldest first (events of one stream complete in order);
    ``drain()`` waits for all of them. Events are CUDA events in use, and a test's events
    on the CPU."""

    def __init__(self) -> None:
        self._held: Deque[Tuple[Any, Any]] = collections.deque()

    def hold(self, event: Any, batch: Any) -> None:
        self._held.append((event, batch))

    def poll(self) -> int:
        """Releases the batches whose copy completed; returns how many are still held."""
        while self._held and self._held[0][0].query():
            self._held.popleft()
        return len(self._held)

    def drain(self) -> None:
        while self._held:
            event, _ = self._held[0]
            event.synchronize()
            self._held.popleft()


class CudaCopier:
    """The CUDA side of the hand-off: copies on a side stream, events, stall timing."""

    def __init__(self, device: torch.device, prefetch: int):
        self.device = device
        self.prefetch = prefetch
        self.stream = torch.cuda.Stream(device=device)

    def copy(self, host: Tensors) -> Tuple[Tensors, Any]:
        """Starts copying ``host`` to the device on the side stream; returns the device
        tensors and an event that completes when the copy has."""
        # The copy must not start before the trainer's earlier work that this batch's
        # device memory may be recycled from (record_stream below covers the rest).
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        try:
            with torch.cuda.stream(self.stream):
                out = {name: t if not isinstance(t, torch.Tensor) else
                       t.to(self.device, non_blocking=True) for name, t in host.items()}
        except torch.cuda.OutOfMemoryError as e:
            nbytes = sum(t.numel() * t.element_size() for t in host.values()
                         if isinstance(t, torch.Tensor))
            raise torch.cuda.OutOfMemoryError(
                f"headrace: out of memory on {self.device} copying a batch of {nbytes} bytes "
                f"with prefetch={self.prefetch} ({self.prefetch + 1} batches on the device "
                f"besides the one the trainer holds, about {(self.prefetch + 2) * nbytes} "
                "bytes): lower prefetch or the batch size") from e
        event = torch.cuda.Event()
        event.record(self.stream)
        return out, event

    def hand_over(self, device_tensors: Tensors, ready: Any) -> Optional[Tuple[Any, Any]]:
        """Makes the trainer's current stream wait for ``ready`` (on the GPU, not the
        host) and marks the tensors as used by it. Returns two timing events around the
        wait: their elapsed time is how long that stream stood waiting for the copy."""
        consumer = torch.cuda.current_stream(self.device)
        before = torch.cuda.Event(enable_timing=True)
        after = torch.cuda.Event(enable_timing=True)
        before.record(consumer)
        consumer.wait_event(ready)
        after.record(consumer)
        for t in device_tensors.values():
            if isinstance(t, torch.Tensor):
                t.record_stream(consumer)
        return before, after


class TorchLoader:
    """An iterable of ``dict[str, torch.Tensor]`` over a :class:`headrace.Loader`.

    ``prefetch`` (CUDA devices): how many batches are copied to the device ahead of the
    one handed out (2: batch k+1 and k+2 are in flight while the trainer computes on k).
    ``metrics_port``/``metrics_labels``: the loader's Prometheus endpoint (see
    :class:`headrace.Loader`).

    ``even_steps``: under ``torch.distributed``, every rank yields the same number of
    batches each epoch, so that DDP's collectives never wait for a rank that has no batch.
    Before handing out each batch the ranks agree (one ``all_reduce`` of a flag over
    ``process_group``, the default group if None), and the epoch ends for every rank when
    the first one runs out: the others skip the rest of theirs
    (:meth:`headrace.Loader.end_epoch`; ``stats()["even_steps_cut_epochs"]`` counts the
    epochs this rank ended early). None (the default): on when the pipeline forms batches
    by ``batch.max_tokens`` (their count per epoch follows the data) and the group has
    more than one rank; batches of ``batch.size`` and ``batch.pack`` rows come in equal
    counts on every rank already, and no collective runs.
    """

    def __init__(self, pipeline: Union[Pipeline, Loader, str, os.PathLike],
                 device: Union[None, str, torch.device] = None,
                 pin_memory: Optional[bool] = None, non_blocking: bool = True,
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 prefetch: int = 2, copier: Any = None,
                 metrics_port: Union[int, str, None] = None,
                 metrics_labels: Optional[Dict[str, str]] = None,
                 even_steps: Optional[bool] = None, process_group: Any = None):
        self.device = torch.device(device) if device is not None else None
        self._even_steps = even_steps
        self._group = process_group
        self._cut_epochs = 0
        self.non_blocking = non_blocking
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise ValueError(f"prefetch must be an int >= 0 (got {prefetch!r})")
        self.prefetch = prefetch
        moves = self.device is not None and self.device.type != "cpu"
        if moves and self.device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"device {self.device} requested but CUDA is not available")
        self.moves = moves
        # The overlapped hand-off: CUDA's, or one a test provides (``copier`` with
        # copy() and hand_over() as CudaCopier's).
        if copier is None and moves and self.device.type == "cuda":
            if self.device.index is None:
                self.device = torch.device("cuda", torch.cuda.current_device())
            copier = CudaCopier(self.device, prefetch)
        self._copier = copier
        self._release = HostRelease()
        pin = moves and self.device.type == "cuda" if pin_memory is None else bool(pin_memory)
        if isinstance(pipeline, Loader):
            self.loader = pipeline
        else:
            self.loader = Loader(pipeline, rank=rank, world_size=world_size, pin_memory=pin,
                                 metrics_port=metrics_port, metrics_labels=metrics_labels)
        self._reset_clock()

    def _reset_clock(self) -> None:
        # The consumer's wait accounting: the engine's rule (exec/consumer_clock.h).
        self._clock = _headrace._ConsumerClock(time.perf_counter())
        self._h2d_s = 0.0
        self._position: Optional[Dict[str, Any]] = None  # see _overlapped
        self._stalls: Deque[Tuple[Any, Any]] = collections.deque()

    def _evens(self) -> bool:
        """Whether this epoch's steps are agreed between the ranks (``even_steps``)."""
        if self._even_steps is False:
            return False
        import torch.distributed as dist
        if not (dist.is_available() and dist.is_initialized()):
            return False
        if dist.get_world_size(self._group) < 2:
            return False
        return bool(self._even_steps) or self.loader._spec.max_tokens > 0

    def _agree(self, has_batch: bool) -> bool:
        """Whether every rank has a batch to hand out now (one all_reduce MIN of a flag,
        on the device NCCL needs, else on the host)."""
        import torch.distributed as dist
        on = (self.device if self.device is not None and self.device.type == "cuda" and
              dist.get_backend(self._group) == "nccl" else torch.device("cpu"))
        flag = torch.tensor([1 if has_batch else 0], dtype=torch.int32, device=on)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=self._group)
        return bool(flag.item())

    def _cut(self) -> None:
        """Another rank ran out first: this rank's epoch ends here (even_steps)."""
        self._cut_epochs += 1
        self._position = None
        self.loader.end_epoch()

    def __iter__(self) -> Iterator[Dict[str, torch.Tensor]]:
        """One epoch, as :class:`headrace.Loader` (the next ``for`` is the next epoch)."""
        if self._copier is not None:
            yield from self._overlapped()
            return
        evens = self._evens()
        it = iter(self.loader)
        while True:
            start = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                batch = None
            if evens and not self._agree(batch is not None):
                if batch is not None:
                    self._cut()
                return
            if batch is None:
                return
            tensors = self.to_torch(batch)
            self._handed(start, time.perf_counter())
            yield tensors

    def _handed(self, start: float, now: float) -> None:
        self._clock.returned(start, now, True, 1)
        self._last_handed = now

    def _overlapped(self) -> Iterator[Dict[str, torch.Tensor]]:
        """The epoch with copies on a side stream, ``prefetch`` batches ahead."""
        evens = self._evens()
        it = iter(self.loader)
        # The loader runs ahead of the trainer by the batches in flight: the position a
        # checkpoint must hold is the one after the batch last handed out.
        self._position = self.loader.state_dict()
        in_flight: Deque[Tuple[Tensors, Any, Dict[str, Any]]] = collections.deque()
        done = False
        try:
            while True:
                start = time.perf_counter()
                self._release.poll()
                while not done and len(in_flight) <= self.prefetch:
                    try:
                        batch = next(it)
                    except StopIteration:
                        done = True
                        break
                    host = self.host_tensors(batch)
                    out, ready = self._copier.copy(host)
                    self._release.hold(ready, host)
                    in_flight.append((out, ready, self.loader.state_dict()))
                if evens and not self._agree(bool(in_flight)):
                    if in_flight:  # copied ahead, never handed out: released below
                        self._cut()
                    else:
                        self._position = None
                    return
                if not in_flight:
                    self._position = None  # the epoch ended: the loader's position is right
                    return
                out, ready, self._position = in_flight.popleft()
                stall = self._copier.hand_over(out, ready)
                if stall is not None:
                    self._stalls.append(stall)
                self._count_stalls()
                self._handed(start, time.perf_counter())
                yield out
        finally:
            # Batches copied ahead and never handed out (a `break`): their host memory
            # goes back once their copies are done (this poll, a later one, or close()).
            self._release.poll()

    def _count_stalls(self) -> None:
        while self._stalls and self._stalls[0][1].query():
            before, after = self._stalls.popleft()
            self._h2d_s += before.elapsed_time(after) / 1000.0

    def host_tensors(self, batch: Batch) -> Tensors:
        """The batch as torch tensors on the host: views of the engine's memory."""
        # Strings (ids, text fields) are lists: passed through as they are.
        return {name: t if isinstance(t, list) else torch.from_dlpack(t)
                for name, t in batch.items()}

    def to_torch(self, batch: Batch) -> Dict[str, torch.Tensor]:
        """The batch as torch tensors (zero-copy on the host), moved if a device is set
        (a plain ``.to``; iterating the loader overlaps the copy instead)."""
        tensors = self.host_tensors(batch)
        if self.moves:
            tensors = {name: t if isinstance(t, list) else
                       t.to(self.device, non_blocking=self.non_blocking)
                       for name, t in tensors.items()}
        return tensors

    def stats(self) -> Dict[str, Any]:
        """Wait accounting of this loop so far, seconds: ``wait_s`` (the host waited for
        batches), ``h2d_s`` (the trainer's stream waited for copies), their sum over
        ``steady_s`` as ``wait_time_ratio``; ``host_batches_held``: host batches whose
        copy has not completed yet; and what the loader counted of the data, as
        :meth:`headrace.Loader.stats` names it: ``samples_failed``, ``errors.<kind>``
        (samples a packer left out or cut among them: ``errors.pack_skipped``,
        ``errors.pack_truncated``), ``pack_*``, a blend's ``source.<name>.*``."""
        out = self._wait_stats()
        for key, value in self.loader.stats().items():
            if key.startswith(_LOADER_KEYS):
                out[key] = value
        return out

    def _wait_stats(self) -> Dict[str, Any]:
        self._count_stalls()
        clock = self._clock.stats()
        steady = 0.0
        # Time since the last batch was handed out counts too (the loop is running): the
        # clock's steady time, up to now.
        if self._clock.started:
            steady = clock["steady_s"] + (time.perf_counter() - self._last_handed)
        waited = clock["wait_s"] + self._h2d_s
        return {"batches": clock["batches"], "wait_s": clock["wait_s"], "h2d_s": self._h2d_s,
                "even_steps_cut_epochs": self._cut_epochs,
                "steady_s": steady, "time_to_first_batch_s": clock["time_to_first_batch_s"],
                "host_batches_held": self._release.poll(),
                "wait_time_ratio": min(1.0, waited / steady) if steady > 0 else 0.0}

    @property
    def wait_time_ratio(self) -> float:
        return self._wait_stats()["wait_time_ratio"]

    def state_dict(self) -> Dict[str, Any]:
        """As :meth:`headrace.Loader.state_dict`: resuming continues after the batch this
        loop handed out last (not after the ones copied ahead of it)."""
        if self._position is not None:
            return dict(self._position)
        return self.loader.state_dict()

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self._position = None
        self.loader.load_state_dict(state)

    def __len__(self) -> int:
        """This rank's batches per epoch."""
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        """As :meth:`headrace.Loader.set_epoch`."""
        self._position = None
        self.loader.set_epoch(epoch)

    @property
    def epoch(self) -> int:
        return self.loader.epoch

    def close(self) -> None:
        """Stops the engine; host batches still being copied are released once their
        copies complete (this waits for them)."""
        self._release.drain()
        self.loader.close()

    def __enter__(self) -> "TorchLoader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def rank_checked(source: Union[TorchLoader, Loader], rank: int, world_size: int, *,
                 prefix: str, given_to: str, how: str, device: Any = None) -> TorchLoader:
    """A caller-made ``Loader`` or ``TorchLoader`` for a trainer's data-parallel ``rank``
    of ``world_size`` (a ``Loader`` wrapped in a ``TorchLoader`` on ``device``); one made
    for another layout would read another rank's batches: ``ConfigError`` "{prefix}a
    loader for rank R of W given to {given_to} rank r of w (...): {how}". The trainer
    integrations' one check (hf, lightning, megatron)."""
    loader = source.loader if isinstance(source, TorchLoader) else source
    if (loader.rank, loader.world_size) != (rank, world_size):
        raise _headrace.ConfigError(
            f"{prefix}a loader for rank {loader.rank} of {loader.world_size} given to "
            f"{given_to} rank {rank} of {world_size} (it would read another rank's batches): "
            f"{how}")
    return source if isinstance(source, TorchLoader) else TorchLoader(source, device=device)
