"""Operators of a pipeline built in code: ``headrace.Pipeline(ops=[...])``.

The built-in operators are the C++ ones of the YAML config (``image.decode`` ...): each
function here returns their config entry, so a pipeline built in code and one read from
YAML are the same PipelineSpec. ``map`` and ``map_batch`` add Python functions.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional, Sequence, Tuple


@dataclasses.dataclass(frozen=True)
class BuiltinOp:
    """A C++ operator by its config name and parameters."""

    name: str
    params: Mapping[str, Any]

    def config(self) -> dict:
        return {self.name: dict(self.params)}


@dataclasses.dataclass(frozen=True)
class MapOp:
    """A Python function applied to each sample on the engine's CPU threads.

    ``fn(sample) -> {field: array}``; see :func:`map`.
    """

    fn: Callable[[dict], Mapping[str, Any]]
    outputs: Tuple[Tuple[str, str, Tuple[int, ...]], ...]
    processes: int = 0
    name: str = ""


@dataclasses.dataclass(frozen=True)
class BatchMapOp:
    """A Python function applied to each complete batch on the engine's threads:
    ``fn(batch) -> None`` (in place) or ``-> {field: array}``; see :func:`map_batch`."""

    fn: Callable[[Any], Any]
    name: str = ""


def _params(**kwargs) -> dict:
    return {k: v for k, v in kwargs.items() if v is not None}


def decode(max_pixels: Optional[int] = None) -> BuiltinOp:
    """``image.decode``: JPEG/PNG/WebP to pixels; rejects images above ``max_pixels``."""
    return BuiltinOp("image.decode", _params(max_pixels=max_pixels))


def resize(shorter_side: Optional[int] = None, width: Optional[int] = None,
           height: Optional[int] = None, antialias: Optional[bool] = None) -> BuiltinOp:
    """``image.resize``: to ``shorter_side`` (keeping aspect) or to exactly ``width`` x ``height``."""
    return BuiltinOp("image.resize", _params(shorter_side=shorter_side, width=width,
                                             height=height, antialias=antialias))


def center_crop(size: Optional[int] = None, width: Optional[int] = None,
                height: Optional[int] = None) -> BuiltinOp:
    """``image.center_crop`` to ``size`` x ``size`` (or ``width`` x ``height``)."""
    return BuiltinOp("image.center_crop", _params(size=size, width=width, height=height))


def random_resized_crop(size: Optional[int] = None, width: Optional[int] = None,
                        height: Optional[int] = None, scale: Optional[Sequence[float]] = None,
                        ratio: Optional[Sequence[float]] = None) -> BuiltinOp:
    """``image.random_resized_crop`` (torchvision semantics), seeded per sample."""
    return BuiltinOp("image.random_resized_crop",
                     _params(size=size, width=width, height=height,
                             scale=list(scale) if scale else None,
                             ratio=list(ratio) if ratio else None))


def flip(p: Optional[float] = None) -> BuiltinOp:
    """``image.flip``: random horizontal flip with probability ``p``, seeded per sample."""
    return BuiltinOp("image.flip", _params(p=p))


def normalize(mean: Optional[Sequence[float]] = None, std: Optional[Sequence[float]] = None,
              dtype: Optional[str] = None, layout: Optional[str] = None) -> BuiltinOp:
    """``image.normalize``: ``(pixel / 255 - mean) / std`` into the batch's ``image`` field."""
    return BuiltinOp("image.normalize", _params(mean=list(mean) if mean else None,
                                                std=list(std) if std else None,
                                                dtype=dtype, layout=layout))


def tokenize(model: str, max_length: Optional[int] = None, **options) -> BuiltinOp:
    """``text.tokenize``: the conversation with SentencePiece ``model``, assistant-only labels."""
    return BuiltinOp("text.tokenize", _params(model=str(model), max_length=max_length, **options))


def map(fn: Callable[[dict], Mapping[str, Any]],  # noqa: A001 (shadows builtin on purpose)
        outputs: Mapping[str, Tuple[str, Sequence[int]]], processes: int = 0,
        name: Optional[str] = None) -> MapOp:
    """A Python function applied to each sample, writing new batch fields.

    ``fn(sample)`` gets a dict: ``index``, ``epoch``, ``id``, ``uri``, ``turns`` (list of
    ``(role, text)``) and, after ``decode``, ``image``: a read-only uint8 ``(H, W, C)`` numpy
    view of the current image, valid only during the call. It returns a dict with one
    array-like per output; ``outputs`` declares each as ``name: (dtype, shape)`` with dtype
    one of ``u8, i32, i64, f16, f32``; the batch gets a ``[B, *shape]`` field per output.

    ``processes=0``: the function runs on the engine's CPU threads, holding the GIL only
    around the call (cheap: ~10 µs of overhead per sample, but functions serialize on
    the GIL). ``processes=N``: it runs in N worker processes; the engine thread waits
    with the GIL released, the image goes to the worker through shared memory (no
    pickling of pixels); ``fn`` must be picklable (a module-level function). Costs ~100 µs
    of IPC per sample, and scales with N for functions that hold the GIL.
    """
    fields = tuple((str(k), str(v[0]), tuple(int(d) for d in v[1])) for k, v in outputs.items())
    label = name or f"python.map({getattr(fn, '__qualname__', type(fn).__name__)})"
    return MapOp(fn=fn, outputs=fields, processes=int(processes), name=label)


def map_batch(fn: Callable[[Any], Optional[Mapping[str, Any]]],
              name: Optional[str] = None) -> BatchMapOp:
    """A Python function applied to each whole batch, inside the pipeline.

    It runs on the engine's CPU thread that completes the batch, before the batch is
    handed over, holding the GIL only around the call: its time is the engine's (it
    appears among the report's ops), not the training loop's wait, and the engine keeps
    producing other batches meanwhile.

    ``fn(batch)`` gets a :class:`headrace.Batch` whose values are *writable* numpy views
    of the engine's buffers (no copy; bf16 fields as uint16), each ``[B, ...]`` with B
    the batch's samples, and ``epoch``, ``index``, ``global_index`` and ``seed`` (derived
    from the pipeline's seed, epoch and index: use it for any randomness so that resumed
    runs match). Change the arrays in place (``batch["image"] *= 2``,
    ``batch["image"][:] = ...``) and return None; or return a dict of some fields to
    arrays of exactly their shape and dtype, which are copied in (returning ``batch``
    itself, as before, works). Fields cannot be added, removed or reshaped: the batch's
    layout is fixed (add per-sample fields with :func:`map`). The views are valid only
    during the call; do not keep them.

    If ``fn`` raises, the batch is dropped and each of its samples counts as an error of
    kind ``user_function_error``, named by epoch, index and URI, with the traceback; the
    run fails once errors pass ``errors.max_error_rate``.
    """
    return BatchMapOp(fn=fn, name=name or f"python.map_batch({getattr(fn, '__qualname__', '?')})")
