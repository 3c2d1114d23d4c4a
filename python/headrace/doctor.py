"""headrace.doctor: which stage limits the trainer, of what kind, and what to change.

The Python side of ``headrace doctor`` (src/headrace/observe/doctor.h), for pipelines the
command line cannot run: those with Python operators (``headrace.ops.map``)."""
import json
import os
from typing import Any, Dict, Optional, Union

from . import _headrace
from .pipeline import Overrides, Pipeline


def doctor(pipeline: Union[Pipeline, str, os.PathLike], seconds: float = 20.0, *,
           storage_mb_s: Optional[float] = None, overrides: Overrides = None) -> Dict[str, Any]:
    """Runs ``pipeline`` (a Pipeline, or a YAML config's path with ``--set``-style
    ``overrides``) against the simulated trainer (``trainer.step_ms`` per batch) for at
    most ``seconds``, or until its run ends, and returns the diagnosis as ``headrace doctor
    --json`` prints it: ``limit`` (storage_latency, storage_bandwidth, cpu, python_gil,
    memory_budget, prefetch or consumer), ``stage``, ``summary``, ``evidence`` (each
    ``{name, value, unit}``) and ``advice`` (each ``{text}``, with ``setting``, ``current``
    and ``suggested`` where one config key expresses it), plus ``report``: the run's
    report. ``storage_mb_s``: the storage's bandwidth when known. The run goes without the
    GIL; Ctrl-C stops it (KeyboardInterrupt)."""
    if isinstance(pipeline, Pipeline):
        if overrides:
            raise _headrace.ConfigError("overrides apply to a config path; build the Pipeline "
                                        "with them instead")
    else:
        pipeline = Pipeline.from_yaml(pipeline, overrides)
    if storage_mb_s is not None and not storage_mb_s > 0:
        raise _headrace.ConfigError(f"storage_mb_s must be positive, got {storage_mb_s}")
    diagnosis, report = _headrace._doctor(pipeline.spec(), float(seconds),
                                          float(storage_mb_s or 0.0))
    result = json.loads(diagnosis)
    result["report"] = json.loads(report)
    return result
