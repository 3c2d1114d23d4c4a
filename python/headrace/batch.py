"""Batch: what a Loader delivers and what a ``map_batch`` function receives.

A module of its own so that ``loader`` (which delivers batches) and ``pipeline`` (which
wraps each ``map_batch`` function in a :class:`_BatchCall`) both import it, instead of
``pipeline`` importing ``loader``, which imports ``pipeline``."""
from __future__ import annotations


class Batch(dict):
    """A batch: ``{field: tensor}``, plus ``{name: list}`` for strings: ``id`` (each
    sample's record id) and the source's text fields.

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
        shapes = {k: (len(v),) if isinstance(v, list) else tuple(getattr(v, "shape", ()))
                  for k, v in self.items()}
        return f"Batch(epoch={self.epoch}, index={self.index}, fields={shapes})"


class _BatchCall:
    """What the engine calls for a ``map_batch`` op, on its own thread: hands the user's
    function a :class:`Batch` of writable numpy views (see batch_op.cc)."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, fields, epoch, index, global_index, seed):
        return self.fn(Batch(fields, epoch, index, global_index, seed=seed))
