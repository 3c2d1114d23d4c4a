"""Size indexes (docs/balanced_steps.md): every sample's tokens, each image's and video's
patches and its kinds of media, built once per dataset and pipeline by the chain's size
pass (headers read, nothing decoded), so that a balanced run (``batch.balance.index``)
deals each step from the index, O(1) a sample, instead of sizing the whole step on every
rank, and a planned pack (``batch.pack.index``) plans its rows from it instead of sizing
each sample on its driver thread. The file is keyed by the pipeline's fingerprint; a run
refuses an index of another.

    headrace.build_size_index(pipeline)             # on this machine's cores
    headrace.ray.build_size_index(pipeline)         # on a Ray cluster's CPUs

``headrace index sizes CONFIG`` is the same build from the command line; all three write
the same bytes (exec/size_index.h; the build is pipeline/size_indexing.cc's).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Optional, Union

from . import _headrace
from .pipeline import Pipeline


def as_pipeline(pipeline: Union[Pipeline, str, os.PathLike]) -> Pipeline:
    return pipeline if isinstance(pipeline, Pipeline) else Pipeline.from_yaml(pipeline)


def index_path(pipeline: Pipeline, out: Union[str, os.PathLike, None]) -> str:
    """Where the index goes: ``out``, else the pipeline's batch.balance.index (or
    batch.pack.index)."""
    path = os.fspath(out) if out is not None else pipeline.spec().size_index
    if not path:
        raise _headrace.ConfigError(
            "build_size_index: give out=PATH or set batch.balance.index (or batch.pack.index) "
            "in the pipeline")
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise _headrace.ConfigError(f"build_size_index: out: no folder {parent}")
    return path


def build_size_index(pipeline: Union[Pipeline, str, os.PathLike],
                     out: Union[str, os.PathLike, None] = None,
                     threads: Optional[int] = None) -> Dict[str, Any]:
    """Sizes every sample of ``pipeline`` (a Pipeline or a YAML config) on ``threads``
    threads (default: this process's cores) and writes the index to ``out`` (default: the
    pipeline's batch.balance.index or batch.pack.index). Returns {path, samples, untold, fingerprint}:
    ``untold`` samples' sizes could not be told (a balanced run costs them its step's
    mean)."""
    pipeline = as_pipeline(pipeline)
    path = index_path(pipeline, out)
    indexing = _headrace._SizeIndexing.make(pipeline.spec())
    threads = threads or len(os.sched_getaffinity(0))
    return _headrace._write_size_index([indexing.build(int(threads))], path)
