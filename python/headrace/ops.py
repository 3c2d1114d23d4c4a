"""Operators of a pipeline built in code: ``headrace.Pipeline(ops=[...])``.

The built-in operators are the C++ ones of the YAML config (``image.decode`` ...): each
function here returns their config entry, so a pipeline built in code and one read from
YAML are the same PipelineSpec. The functions are made from the schema the C++ op list
exports (``decode``, ``resize``, ``center_crop``, ``random_resized_crop``, ``flip``,
``normalize``, ``tokenize``, ``video_decode``, ``video_patchify``, ``audio_decode``,
``audio_resample``, ``audio_crop``, ... and ``op(name, **params)`` for any), with the
parameters in the order the op declares them. ``map`` and ``map_batch`` add Python
functions.
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from . import _headrace


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


def _plain(value: Any) -> Any:
    """A parameter as the config (JSON) writes it: paths as strings, sequences as lists."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _params(**kwargs) -> dict:
    return {k: _plain(v) for k, v in kwargs.items() if v is not None}


# The C++ operators' schema (ops/all_ops.h): name, doc and parameters (key, type, default,
# choices) of each, in the list's order. The builders below are made from it, so a new
# C++ operator needs no edit here.
_SCHEMA = _headrace._op_schema()
_PARAMS = {entry["name"]: [p[0] for p in entry["params"]] for entry in _SCHEMA}


def op(name: str, **params) -> BuiltinOp:
    """Any built-in operator by its config name: ``op("image.resize", shorter_side=256)``.

    Parameters left out (or None) keep their defaults. An unknown parameter or a value of
    the wrong type raises :class:`headrace.ConfigError`, naming the key and the allowed
    ones, as a YAML config would; ranges are checked when the pipeline is built.
    """
    params = _params(**params)
    _headrace._check_op(name, json.dumps(params))
    return BuiltinOp(name, params)


def _describe(entry: dict) -> str:
    lines = [f"``{entry['name']}``: {entry['doc']}", "", "Parameters (default):"]
    for key, type_name, default, choices in entry["params"]:
        shown = "unset" if default is None else repr(default)
        if choices:
            type_name += " (" + ", ".join(choices) + ")"
        lines.append(f"    {key}: {type_name} = {shown}")
    return "\n".join(lines)


def _make_builder(entry: dict) -> Callable[..., BuiltinOp]:
    name = entry["name"]
    keys = _PARAMS[name]

    def builder(*args, **kwargs) -> BuiltinOp:
        if len(args) > len(keys):
            raise TypeError(f"{name} takes at most {len(keys)} positional arguments "
                            f"({', '.join(keys)}), got {len(args)}")
        for key, value in zip(keys, args):
            if key in kwargs:
                raise TypeError(f"{name}: got two values for '{key}'")
            kwargs[key] = value
        return op(name, **kwargs)

    builder.__name__ = builder.__qualname__ = name.rsplit(".", 1)[-1]
    builder.__doc__ = _describe(entry)
    builder.__signature__ = inspect.Signature(
        [inspect.Parameter(k, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)
         for k in keys], return_annotation=BuiltinOp)
    return builder


def _short_names() -> Dict[str, str]:
    """The builders' names: the last part of the op's name for image and text ops
    (``decode`` for ``image.decode``, ``tokenize``), and the modality too for the others
    (``video_decode``, ``audio_crop``), so that a short name never means two things."""
    out: Dict[str, str] = {}
    for entry in _SCHEMA:
        modality, short = entry["name"].rsplit(".", 1)
        key = short if modality in ("image", "text") else modality.replace(".", "_") + "_" + short
        assert key not in out, f"two ops would share the builder name {key}"
        out[key] = entry["name"]
    return out


for _short, _name in _short_names().items():
    if _short in ("op", "map", "map_batch"):
        continue
    globals()[_short] = _make_builder(next(e for e in _SCHEMA if e["name"] == _name))
del _short, _name


def map(fn: Callable[[dict], Mapping[str, Any]],  # noqa: A001 (shadows builtin on purpose)
        outputs: Mapping[str, Tuple[str, Sequence[int]]], processes: int = 0,
        name: Optional[str] = None) -> MapOp:
    """A Python function applied to each sample, writing new batch fields.

    ``fn(sample)`` gets a dict: ``index``, ``epoch``, ``id``, ``uri``, ``turns`` (list of
    ``(role, text)``) and, for each image value the chain holds where the op stands (after
    ``decode``: ``image``), a read-only uint8 ``(H, W, C)`` numpy view of it by its name,
    valid only during the call. It returns a dict with one
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
