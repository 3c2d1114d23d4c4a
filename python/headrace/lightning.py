"""Headrace under Lightning: a ``LightningDataModule`` whose checkpoints carry the loader's
position, so ``trainer.fit(..., ckpt_path=...)`` continues with the very next batch.

    import headrace, headrace.lightning, lightning as L
    data = headrace.lightning.HeadraceDataModule(train=pipeline, val=val_pipeline)
    L.Trainer(max_epochs=3).fit(model, datamodule=data)
    L.Trainer(max_epochs=3).fit(model, datamodule=data, ckpt_path="last.ckpt")   # exact resume

How it fits Lightning's loops:

- ``train_dataloader()`` returns the loader itself (``LightningBatches``), not a
  ``DataLoader``: Lightning puts a ``DistributedSampler`` only into ``DataLoader``s
  (``use_distributed_sampler``), so each rank reads the batches Headrace assigns it (the
  data-parallel rank and size of ``trainer.distributed_sampler_kwargs``). Each ``iter()`` (one per epoch) first
  calls ``set_epoch(trainer.current_epoch)``: Headrace's epoch is Lightning's, also after
  ``limit_train_batches`` cut an epoch short.
- The state saved is the loader's position after the last batch it handed out, which is
  the batch of the step being checkpointed: Lightning fetches ahead (to know an epoch's
  last batch) only from loaders without a length (``_PrefetchDataFetcher``), and this one
  has one. (``tests/python/test_trainers_lightning.py`` checks the saved position.)
- Lightning writes checkpoints from rank 0 only, so the state saved holds every rank's
  (gathered when the checkpoint is made: ``{"ranks": [...]}``), and each rank loads its
  own on resume.
- The state goes into the checkpoint twice, the same both times: as the DataModule's
  ``state_dict()`` (under its class name) and as the train loader's own (Lightning saves
  every loader with ``state_dict``/``load_state_dict`` in the fit loop's state; without
  them it warns that a mid-epoch resume is not exact). On ``ckpt_path`` the DataModule's is
  loaded before ``train_dataloader()`` is called, then the fit loop's, before the first
  ``iter()``.
- Batches stay on the host unless the trainer's device is CUDA, where the loader copies
  them ahead on a side stream (``headrace.torch.TorchLoader``) and Lightning's
  ``transfer_batch_to_device`` finds them there.
- ``val_dataloader()`` (when ``val`` is given) iterates epoch 0 of its pipeline each time,
  the same batches at every validation.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import lightning.pytorch as pl

from ._headrace import ConfigError
from .loader import Loader
from .models import ModelInputs
from .pipeline import Pipeline
from .torch import TorchLoader, rank_checked

__all__ = ["HeadraceDataModule", "LightningBatches"]

Source = Union[Pipeline, TorchLoader, Loader, str, os.PathLike]
ToInputs = Optional[Callable[[Dict[str, Any]], Any]]


def _gathered(state: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Every process's loader state, by rank (tensor-parallel peers of a caller-made
    loader share a rank, and their states are the same)."""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [state]
    states: List[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(states, state)
    return sorted(states, key=lambda s: s["rank"])


def _this_ranks(state: Dict[str, Any], rank: int) -> Dict[str, Any]:
    if "ranks" not in state:
        return state  # a loader's own state dict
    mine = [c for c in state["ranks"] if isinstance(c, dict) and c.get("rank") == rank]
    if mine:
        # Tensor-parallel peers share a rank and save the same state; two that differ
        # are not one rank's position.
        if any(c != mine[0] for c in mine[1:]):
            raise ConfigError(
                f"checkpoint: {len(mine)} different loader states for rank {rank}: the "
                "checkpoint mixes runs; resume from one that HeadraceDataModule wrote")
        return mine[0]
    raise ConfigError(
        f"checkpoint: no loader state for rank {rank} (it holds ranks "
        f"{[c.get('rank') if isinstance(c, dict) else c for c in state['ranks']]} of world "
        f"size {_world_size_of(state['ranks'])})")


def _world_size_of(states: List[Any]) -> Any:
    first = states[0] if states else None
    return first.get("world_size") if isinstance(first, dict) else None


def _data_parallel_layout(trainer: Any) -> Tuple[Optional[int], Optional[int]]:
    """This process's data-parallel rank and size as Lightning gives a ``DataLoader`` its
    ``DistributedSampler`` (``distributed_sampler_kwargs``: the global rank and world
    size, or the data-parallel mesh's under ``ModelParallelStrategy``); (None, None) with
    no trainer."""
    if trainer is None:
        return None, None
    kwargs = trainer.distributed_sampler_kwargs
    if kwargs:
        return int(kwargs["rank"]), int(kwargs["num_replicas"])
    return trainer.global_rank, trainer.world_size


def _model_inputs(trainer: Any) -> ToInputs:
    """``headrace.models.ModelInputs`` for the transformers model the LightningModule
    holds (the first found, itself or a submodule), None when it holds none: the batch
    then reaches ``training_step`` as it is."""
    module = getattr(trainer, "lightning_module", None) if trainer is not None else None
    if module is None:
        return None
    try:
        from transformers import PreTrainedModel
    except ImportError:
        return None
    for sub in module.modules():
        if isinstance(sub, PreTrainedModel):
            return _KeepingDummyKinds(ModelInputs(sub))
    return None


class _KeepingDummyKinds:
    """ModelInputs, and the batch's ``dummy_kinds`` beside the forward arguments when it
    has one (``batch.balance.every_rank``): for ``headrace.models.forward_with_dummy`` in
    ``training_step``, which takes it out before the forward."""

    def __init__(self, to_model: ModelInputs):
        self.to_model = to_model

    def __call__(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        out = self.to_model(batch)
        if "dummy_kinds" in batch:
            out["dummy_kinds"] = batch["dummy_kinds"]
        return out


class LightningBatches:
    """The train loader as Lightning drives it: ``len()``, one ``iter()`` per epoch at
    ``trainer.current_epoch``, batches passed through ``to_inputs`` (default: see
    ``HeadraceDataModule``), and the loader's ``state_dict``/``load_state_dict`` (which
    makes Lightning's fit loop save it too, and treat a mid-epoch checkpoint as
    resumable)."""

    def __init__(self, loader: TorchLoader, datamodule: "HeadraceDataModule",
                 to_inputs: ToInputs = None):
        self.loader = loader
        self.datamodule = datamodule
        self.to_inputs = to_inputs

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        trainer = self.datamodule.trainer
        if trainer is not None:
            # Keeps a loaded position when it is in this epoch (Loader.set_epoch).
            self.loader.set_epoch(trainer.current_epoch)
        if self.to_inputs is None:
            self.to_inputs = _model_inputs(trainer)
        for batch in self.loader:
            yield batch if self.to_inputs is None else self.to_inputs(batch)

    def state_dict(self) -> Dict[str, Any]:
        """``{"ranks": [every rank's loader state, by rank]}``: Lightning writes the
        checkpoint from rank 0 only, so each rank's state is gathered into it (a
        collective: Lightning calls this on every rank when it saves)."""
        return {"ranks": _gathered(self.loader.state_dict())}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """This rank's state from ``state_dict()``'s form (or a single loader state)."""
        self.loader.load_state_dict(_this_ranks(state, self.loader.loader.rank))


class _ValidationBatches:
    """A validation loader: epoch 0 of its pipeline at every validation."""

    def __init__(self, loader: TorchLoader, to_inputs: ToInputs = None, trainer: Any = None):
        self.loader = loader
        self.to_inputs = to_inputs
        self.trainer = trainer

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        self.loader.set_epoch(0)
        if self.to_inputs is None:
            self.to_inputs = _model_inputs(self.trainer)
        for batch in self.loader:
            yield batch if self.to_inputs is None else self.to_inputs(batch)


class HeadraceDataModule(pl.LightningDataModule):
    """Train (and optionally validation) batches from Headrace pipelines.

    ``train``/``val``: a ``headrace.Pipeline`` or YAML path (a ``TorchLoader`` is made for
    the data-parallel rank and size Lightning would give a ``DistributedSampler``,
    ``trainer.distributed_sampler_kwargs``: the global rank of the world size, or the
    data-parallel mesh's under ``ModelParallelStrategy``; on the trainer's device when it
    is CUDA), or a ``Loader``/``TorchLoader`` made by the caller for that rank and size
    (another is a ``ConfigError``: it would read another rank's batches).
    ``to_inputs``: batch -> what ``training_step`` receives. Default: when the
    LightningModule holds a transformers model, ``headrace.models.ModelInputs(model)``:
    the keyword arguments of its ``forward`` (``self.model(**batch)``; a packed batch's
    samples kept apart, a Qwen-VL model's M-RoPE positions, checked at the first batch);
    otherwise the dict of tensors as it is (``to_inputs=lambda b: b`` keeps it so). Under
    ``batch.balance.every_rank`` the default keeps the batch's ``dummy_kinds`` too: call
    ``headrace.models.forward_with_dummy(self.model, batch)`` in ``training_step`` (it
    takes the flags out and adds the vision tower's dummy, docs/balanced_steps.md).
    ``state_dict()`` is ``{"train": {"ranks": [each rank's loader state]}}``;
    ``load_state_dict`` applies this rank's when the train loader is made (or at once, if
    it exists).
    """

    def __init__(self, train: Source, val: Optional[Source] = None,
                 to_inputs: ToInputs = None):
        super().__init__()
        for key, value in (("train", train), ("val", val)):
            if value is not None and not isinstance(value, (Pipeline, TorchLoader, Loader, str,
                                                            os.PathLike)):
                raise ConfigError(
                    f"{key}: {type(value).__name__}: expected a headrace.Pipeline, a pipeline "
                    "YAML path, a headrace.Loader or a headrace.torch.TorchLoader")
        self._train_source, self._val_source = train, val
        self._to_inputs = to_inputs
        self._train: Optional[LightningBatches] = None
        self._val: Optional[_ValidationBatches] = None
        self._pending: Optional[Dict[str, Any]] = None  # a loaded state, until the loader exists
        if val is None:
            # Lightning asks for val_dataloader only when the hook is overridden.
            self.val_dataloader = None  # type: ignore[assignment]

    def _make_loader(self, source: Source) -> TorchLoader:
        trainer = self.trainer
        rank, world_size = _data_parallel_layout(trainer)
        if isinstance(source, (TorchLoader, Loader)):
            if rank is None:  # no trainer yet: nothing to check against
                return source if isinstance(source, TorchLoader) else TorchLoader(source)
            return rank_checked(source, rank, world_size, prefix="",
                                given_to="the trainer's data-parallel",
                                how="pass the Pipeline instead, or make the loader with "
                                    "trainer.distributed_sampler_kwargs' rank and num_replicas")
        device = None
        if trainer is not None:
            root = trainer.strategy.root_device
            device = root if root.type == "cuda" else None
        return TorchLoader(source, device=device, rank=rank, world_size=world_size)

    def train_dataloader(self) -> LightningBatches:
        if self._train is None:
            self._train = LightningBatches(self._make_loader(self._train_source), self,
                                           self._to_inputs)
        if self._pending is not None:
            self._train.load_state_dict(self._pending)
            self._pending = None
        return self._train

    def val_dataloader(self) -> _ValidationBatches:  # type: ignore[override]
        if self._val is None:
            self._val = _ValidationBatches(self._make_loader(self._val_source), self._to_inputs,
                                           self.trainer)
        return self._val

    def state_dict(self) -> Dict[str, Any]:
        if self._train is not None:
            return {"train": self._train.state_dict()}
        return {"train": self._pending} if self._pending is not None else {}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        state = state_dict.get("train")
        if state is None:
            return
        if self._train is not None:
            self._train.load_state_dict(state)
        else:
            self._pending = state

    def teardown(self, stage: str) -> None:
        # The engines' threads and memory go; the positions stay (a later fit continues).
        for batches in (self._train, self._val):
            if batches is not None:
                batches.loader.close()
