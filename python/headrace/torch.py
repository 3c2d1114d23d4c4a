"""PyTorch adapter: batches as ``torch.Tensor``s, optionally on a device.

    loader = headrace.torch.TorchLoader(pipeline, device="cuda")  # or "cpu" / None
    for epoch in range(epochs):
        for batch in loader:             # {"image": Tensor[B,3,224,224], "input_ids": ...}
            loss = model(batch["image"], batch["input_ids"])
            ...
    loader.wait_time_ratio               # at any time

On the host, each tensor is ``torch.from_dlpack`` of the engine's memory: no copy. With
a CUDA device, batches are allocated in pinned host memory (``pin_memory``, default on
for CUDA) and moved with ``.to(device, non_blocking=True)``; on a CPU-only machine or
with ``device`` None/"cpu" that step is skipped (a no-op path).

wait-time ratio = (time waiting for the next batch + converting and starting its
transfer) / time since the first batch was handed over, as DESIGN.md defines it; the
first batch's wait is reported apart (``stats()["time_to_first_batch_s"]``).
"""
from __future__ import annotations

import os
import time
from typing import Any, Dict, Iterator, Optional, Union

import torch

from .loader import Batch, Loader
from .pipeline import Pipeline


class TorchLoader:
    """An iterable of ``dict[str, torch.Tensor]`` over a :class:`headrace.Loader`."""

    def __init__(self, pipeline: Union[Pipeline, Loader, str, os.PathLike],
                 device: Union[None, str, torch.device] = None,
                 pin_memory: Optional[bool] = None, non_blocking: bool = True,
                 rank: Optional[int] = None, world_size: Optional[int] = None):
        self.device = torch.device(device) if device is not None else None
        self.non_blocking = non_blocking
        moves = self.device is not None and self.device.type != "cpu"
        if moves and self.device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"device {self.device} requested but CUDA is not available")
        self.moves = moves
        pin = moves and self.device.type == "cuda" if pin_memory is None else bool(pin_memory)
        if isinstance(pipeline, Loader):
            self.loader = pipeline
        else:
            self.loader = Loader(pipeline, rank=rank, world_size=world_size, pin_memory=pin)
        self._reset_clock()

    def _reset_clock(self) -> None:
        self._first_at: Optional[float] = None
        self._last_yield: Optional[float] = None
        self._wait_s = 0.0
        self._ttfb_s = 0.0
        self._batches = 0
        self._created = time.perf_counter()

    def __iter__(self) -> Iterator[Dict[str, torch.Tensor]]:
        """One epoch, as :class:`headrace.Loader` (the next ``for`` is the next epoch)."""
        it = iter(self.loader)
        while True:
            start = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                return
            tensors = self.to_torch(batch)
            now = time.perf_counter()
            if self._first_at is None:
                self._first_at = now
                self._ttfb_s = now - self._created
            else:
                self._wait_s += now - start
            self._batches += 1
            self._last_yield = now
            yield tensors

    def to_torch(self, batch: Batch) -> Dict[str, torch.Tensor]:
        """The batch as torch tensors (zero-copy on the host), moved if a device is set."""
        # Strings (ids, text fields) are lists: passed through as they are.
        tensors = {name: t if isinstance(t, list) else torch.from_dlpack(t)
                   for name, t in batch.items()}
        if self.moves:
            tensors = {name: t if isinstance(t, list) else
                       t.to(self.device, non_blocking=self.non_blocking)
                       for name, t in tensors.items()}
        return tensors

    def stats(self) -> Dict[str, Any]:
        """Wait accounting of this loop so far, seconds."""
        steady = (self._last_yield - self._first_at) if self._first_at is not None else 0.0
        # Time since the last batch was handed out counts too (the loop is running).
        if self._first_at is not None:
            steady = time.perf_counter() - self._first_at
        return {"batches": self._batches, "wait_s": self._wait_s, "steady_s": steady,
                "time_to_first_batch_s": self._ttfb_s,
                "wait_time_ratio": self._wait_s / steady if steady > 0 else 0.0}

    @property
    def wait_time_ratio(self) -> float:
        return self.stats()["wait_time_ratio"]

    def state_dict(self) -> Dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.loader.load_state_dict(state)

    def __len__(self) -> int:
        """This rank's batches per epoch."""
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        """As :meth:`headrace.Loader.set_epoch`."""
        self.loader.set_epoch(epoch)

    @property
    def epoch(self) -> int:
        return self.loader.epoch

    def close(self) -> None:
        self.loader.close()

    def __enter__(self) -> "TorchLoader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
