"""``headrace.ray.build_size_index``: the size index (headrace/size_index.py) built on a
Ray cluster's CPUs, for datasets whose size pass one machine's cores would take too long
over. The driver opens the source once to count its samples; each task prepares the
pipeline on its node, sizes a range of samples with its CPUs' threads and returns that
range's part of the index as bytes (20 bytes a sample and 8 an image); the driver joins
the parts in order and writes the file: the bytes ``headrace index sizes`` writes.

Each task reads the source's index (a manifest, the shard sidecars) once, as a worker of
``headrace.ray.Loader`` does; relative paths resolve against the driver's folder where a
node has it (the same machine, a shared file system). A part whose fingerprint differs
from the driver's (a tokenizer file that differs on a node) fails the build, naming both.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Optional, Union

from .. import _headrace
from ..pipeline import Pipeline
from ..size_index import as_pipeline, index_path
from .loader import _connect, _ray


def _size_range(pipeline: Pipeline, cwd: str, begin: int, end: int, threads: int) -> bytes:
    if cwd and os.path.isdir(cwd):
        os.chdir(cwd)
    return _headrace._SizeIndexing.make(pipeline.spec()).build(threads, begin, end)


def build_size_index(pipeline: Union[Pipeline, str, os.PathLike],
                     out: Union[str, os.PathLike, None] = None, *,
                     samples_per_task: int = 50_000, task_cpus: int = 1,
                     task_resources: Optional[Dict[str, float]] = None,
                     address: Optional[str] = None) -> Dict[str, Any]:
    """Sizes every sample of ``pipeline`` in Ray tasks of ``samples_per_task`` samples,
    each with ``task_cpus`` CPUs (and ``task_resources``, e.g. ``{"headrace_cpu": 1}`` to
    keep them on CPU nodes), and writes the index to ``out`` (default: the pipeline's
    batch.balance.index or batch.pack.index). Attaches to the cluster at ``address`` unless this process
    already is. Returns {path, samples, untold, fingerprint, tasks}."""
    if samples_per_task < 1 or task_cpus < 1:
        raise _headrace.ConfigError(
            f"headrace.ray.build_size_index: samples_per_task ({samples_per_task}) and "
            f"task_cpus ({task_cpus}) must be at least 1")
    pipeline = as_pipeline(pipeline)
    path = index_path(pipeline, out)
    indexing = _headrace._SizeIndexing.make(pipeline.spec())
    n = indexing.samples
    _connect(address)
    ray = _ray()
    task = ray.remote(_size_range).options(num_cpus=task_cpus,
                                           resources=dict(task_resources or {}))
    # An empty source is one empty range: its index still names the fingerprint.
    ranges = [(b, min(b + samples_per_task, n)) for b in range(0, n, samples_per_task)] or [(0, 0)]
    parts = ray.get([task.remote(pipeline, os.getcwd(), b, e, task_cpus) for b, e in ranges])
    summary = _headrace._write_size_index(parts, path)
    if summary["fingerprint"] != indexing.fingerprint:
        os.remove(path)
        raise _headrace.ConfigError(
            f"headrace.ray.build_size_index: the tasks sized another pipeline (fingerprint "
            f"{summary['fingerprint']}; this process's: {indexing.fingerprint}): a file the "
            "pipeline names differs on their nodes")
    summary["tasks"] = len(ranges)
    return summary
