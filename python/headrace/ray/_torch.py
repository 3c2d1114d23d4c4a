"""headrace.ray.TorchLoader: headrace.torch.TorchLoader over a headrace.ray.Loader."""
from __future__ import annotations

from typing import Any, Dict, Optional

from .. import torch as _torch
from .loader import Loader


class TorchLoader(_torch.TorchLoader):
    """Batches as ``torch.Tensor`` (on the host, zero-copy views of Ray's object store),
    moved to ``device`` when one is given; everything else as
    :class:`headrace.torch.TorchLoader`. ``pipeline`` may be a :class:`Loader`; other
    keyword arguments (``workers``, ``placement``, ``worker_resources``, ``prefetch``: the
    requests a rank keeps ahead, ``metrics_port``, ...) go to it. ``device_prefetch`` is
    :class:`headrace.torch.TorchLoader`'s ``prefetch``: batches copied to the device ahead
    of the one handed out (CUDA)."""

    def __init__(self, pipeline, device=None, non_blocking: bool = True,
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 device_prefetch: int = 2, copier: Any = None, **options: Any):
        loader = pipeline if isinstance(pipeline, Loader) else \
            Loader(pipeline, rank=rank, world_size=world_size, **options)
        # Batches arrive in the object store, not in pinned memory: nothing to pin here.
        super().__init__(loader, device=device, pin_memory=False, non_blocking=non_blocking,
                         prefetch=device_prefetch, copier=copier)

    def scale(self, n: int) -> None:
        """As :meth:`headrace.ray.Loader.scale`."""
        self.loader.scale(n)

    def stats(self) -> Dict[str, Any]:
        """This loop's wait accounting, plus the pool's (workers, nodes, reassignments)."""
        out = self.loader.stats()
        out.update(super().stats())
        return out
