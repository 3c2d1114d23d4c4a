"""Pipeline: the immutable description of a pipeline (source -> ops -> batch)."""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Union

from . import _headrace
from . import ops as _ops
from .batch import _BatchCall

Overrides = Union[None, Sequence[str], Mapping[str, Any]]


def _override_list(overrides: Overrides) -> List[str]:
    """``{"batch.size": 64}`` or ``["batch.size=64"]`` -> ``["batch.size=64"]``."""
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        return [f"{k}={json.dumps(v)}" for k, v in overrides.items()]
    return [str(o) for o in overrides]


def _mix_entry(entry: Any, i: int) -> Any:
    """A ``source.mix`` entry as config: paths as text, and its own ``ops`` (run on its
    samples before the pipeline's, which every entry shares) from headrace.ops builders."""
    if not isinstance(entry, Mapping):
        return entry
    out = {k: str(v) if isinstance(v, os.PathLike) else v for k, v in entry.items()}
    if "ops" in out:
        ops = []
        for j, op in enumerate(out["ops"]):
            if not isinstance(op, _ops.BuiltinOp):
                raise _headrace.ConfigError(
                    f"source.mix[{i}].ops[{j}]: expected an op from headrace.ops (decode(), "
                    f"resize(...), ...; an entry's ops are the built-in ones), got {op!r}")
            ops.append(op.config())
        out["ops"] = ops
    return out


class Pipeline:
    """What to compute: the same PipelineSpec as a YAML config, built in code.

    ``Pipeline(source="data/sample/manifest.jsonl", ops=[headrace.ops.decode(), ...],
    batch_size=64, seed=0)``, or ``Pipeline.from_yaml("examples/vqa.yaml")``. ``source``
    is a manifest path or the config's ``source`` mapping, e.g. WebDataset tar shards:
    ``{"shards": "s3://b/train/shard-{000000..000999}.tar", "shuffle_window": 4}``, or a
    blend, ``{"mix": [{"name": "vqa", "manifest": ..., "weight": 0.7, "ops": [...]}, ...]}``
    where an entry's ``ops`` run on its samples before ``ops``, which all share. Keyword
    names are the config's (``batch_size`` is ``batch.size``); ``overrides`` takes any
    other key as in ``headrace run --set``. Errors name the config key. ``epochs`` limits
    the run; the default, None, leaves it to the training loop (a loader iterates one
    epoch per ``for``, as many as the loop asks for). ``pack`` is ``batch.pack``
    (``{"seq_len": 4096, "window": 64}``: several samples per row, with ``cu_seqlens``);
    ``max_tokens`` is ``batch.max_tokens`` (unpadded batches of at most that many tokens;
    ``pack={"window": W}`` sets its look-ahead). ``balance`` is ``batch.balance``
    (``"tokens"``, ``"qwen2_vl"``, ... or ``{"cost": "qwen3_vl", "llm_layers": 48}``): each
    data-parallel step's samples dealt over the ranks by what they cost the step.
    """

    def __init__(self, source: Union[str, os.PathLike, Mapping[str, Any]],
                 ops: Iterable[Any] = (), *, batch_size: int = 32, seed: int = 0,
                 epochs: Optional[int] = None, shuffle: bool = True, drop_last: bool = False,
                 cpu_threads: int = 0, prefetch: int = 4,
                 memory_budget: Union[None, int, str] = None,
                 pack: Optional[Mapping[str, Any]] = None, max_tokens: Optional[int] = None,
                 balance: Union[None, str, Mapping[str, Any]] = None,
                 overrides: Overrides = None):
        if isinstance(source, Mapping):
            source_config = {k: str(v) if isinstance(v, os.PathLike) else v
                             for k, v in source.items()}
            if "mix" in source_config:  # a blend: each entry's own ops as config
                source_config["mix"] = [_mix_entry(e, i) for i, e in
                                        enumerate(source_config["mix"])]
        else:
            source_config = {"manifest": os.fspath(source)}
        config = {
            "source": source_config,
            "seed": int(seed),
            "epochs": None if epochs is None else int(epochs),
            "shuffle": bool(shuffle),
            "batch": {"size": int(batch_size), "drop_last": bool(drop_last)},
            "ops": [],
            "execution": {"cpu_threads": int(cpu_threads)},
            "prefetch": {"depth": int(prefetch)},
        }
        if memory_budget is not None:
            config["memory"] = {"budget_bytes": memory_budget}
        if pack is not None:  # batch.pack: {seq_len, window, overflow, field}
            config["batch"]["pack"] = dict(pack)
        if max_tokens is not None:  # batch.max_tokens: batches by a token budget
            config["batch"]["max_tokens"] = int(max_tokens)
        if balance is not None:  # batch.balance: a cost name, or {cost, model dimensions}
            config["batch"]["balance"] = ({"cost": balance} if isinstance(balance, str)
                                          else dict(balance))
        self._user_ops: List[tuple] = []  # (position, MapOp)
        self._batch_ops: List[_ops.BatchMapOp] = []
        position = 0
        for op in ops:
            if isinstance(op, _ops.BuiltinOp):
                config["ops"].append(op.config())
                position += 1
            elif isinstance(op, _ops.MapOp):
                self._user_ops.append((position, op))
                position += 1
            elif isinstance(op, _ops.BatchMapOp):
                self._batch_ops.append(op)
            else:
                raise _headrace.ConfigError(
                    f"ops[{position}]: expected an op from headrace.ops (decode(), resize(...),"
                    f" map(...), ...), got {op!r}")
        self._text = json.dumps(config)  # JSON is YAML
        self._path: Optional[str] = None
        self._overrides = _override_list(overrides)
        self.spec()  # validate now, so that errors surface where the pipeline is built

    @classmethod
    def from_yaml(cls, path: Union[str, os.PathLike], overrides: Overrides = None) -> "Pipeline":
        """The pipeline of a YAML config file, with ``--set``-style overrides."""
        self = cls.__new__(cls)
        self._user_ops, self._batch_ops = [], []
        self._text, self._path = None, os.fspath(path)
        self._overrides = _override_list(overrides)
        self.spec()
        return self

    def map(self, fn, outputs, processes: int = 0, position: Optional[int] = None,
            name: Optional[str] = None) -> "Pipeline":
        """A new pipeline with ``headrace.ops.map(fn, outputs, processes)`` inserted at
        ``position`` in the op list (default: at the end)."""
        op = _ops.map(fn, outputs, processes=processes, name=name)
        new = self._copy()
        at = len(self.spec().op_names) if position is None else int(position)
        new._user_ops.append((at, op))
        new.spec()
        return new

    def map_batch(self, fn, name: Optional[str] = None) -> "Pipeline":
        """A new pipeline that also applies ``headrace.ops.map_batch(fn)`` to every batch
        (after the batch ops already there), on the engine's threads."""
        new = self._copy()
        new._batch_ops.append(_ops.map_batch(fn, name=name))
        new.spec()
        return new

    def spec(self) -> "_headrace._Spec":
        """A fresh, validated C++ PipelineSpec (user ops included)."""
        if self._path is not None:
            spec = _headrace._Spec.from_file(self._path, self._overrides)
        else:
            spec = _headrace._Spec.from_text(self._text, self._overrides)
        for position, op in sorted(self._user_ops, key=lambda p: p[0]):
            fn = op.fn
            if op.processes > 0:
                from ._procpool import ProcessMap
                fn = ProcessMap(op.fn, op.outputs, op.processes)
            # In worker processes the call waits without the GIL: not the GIL's wait.
            _headrace._insert_map_op(spec, position, op.name, list(op.outputs), fn,
                                     meter_gil=op.processes == 0)
        if self._batch_ops:
            for op in self._batch_ops:
                _headrace._add_batch_op(spec, op.name, _BatchCall(op.fn))
        spec.validate()
        return spec

    def to_yaml(self) -> str:
        """The canonical YAML of the effective spec (user ops and batch ops as ``user``
        placeholders, which ``from_yaml`` refuses)."""
        return self.spec().to_yaml()

    def fingerprint(self, elastic: bool = False) -> str:
        """A hash of everything that decides batch content (not threads, budgets...);
        Python ops and batch ops count by name. ``elastic``: without what an elastic
        resume may change (the batch size, a blend's weights)."""
        text = self.spec().content_yaml(elastic=elastic)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def batch_ops(self) -> List[_ops.BatchMapOp]:
        return list(self._batch_ops)

    def _copy(self) -> "Pipeline":
        new = Pipeline.__new__(Pipeline)
        new.__dict__.update(self.__dict__)
        new._user_ops = list(self._user_ops)
        new._batch_ops = list(self._batch_ops)
        return new

    def __repr__(self) -> str:
        spec = self.spec()
        source = f"shards={spec.shards!r}" if spec.shards else f"manifest={spec.manifest!r}"
        return (f"Pipeline({source}, ops={spec.op_names}, "
                f"batch_size={spec.batch_size}, seed={spec.seed}, epochs={spec.epochs})")
