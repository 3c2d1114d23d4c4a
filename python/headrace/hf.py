"""Headrace under the Hugging Face ``Trainer`` (and ``accelerate``): Headrace's epochs, rank
split and exact resume, with no re-sharding, re-shuffling or replay by either.

    import headrace, headrace.hf
    trainer = headrace.hf.HeadraceTrainer(model=model, args=training_args,
                                          train_loader=pipeline)   # a Pipeline or a TorchLoader
    trainer.train()                            # later: trainer.train(resume_from_checkpoint=True)

What it changes in ``Trainer`` (``HeadraceTrainerMixin``, for any ``Trainer`` subclass:
``class SFT(headrace.hf.HeadraceTrainerMixin, trl.SFTTrainer)``):

- ``get_train_dataloader`` returns the Headrace loader itself (``TrainerBatches``), not a
  ``torch.utils.data.DataLoader``. ``Accelerator.prepare`` only wraps ``DataLoader``s
  (``accelerate.Accelerator._prepare_one``), and the Trainer only hands it those, so no
  ``DataLoaderShard``/``DataLoaderDispatcher`` is made: ``dispatch_batches``,
  ``split_batches``, ``even_batches`` and ``use_seedable_sampler`` have nothing to act on,
  and each rank reads the batches Headrace assigns it (its data-parallel rank as accelerate
  counts it: ``data_parallel_layout``). The Trainer calls ``set_epoch(epoch)`` before each
  epoch and ``len()`` for its steps per epoch; both are the loader's.
- Each checkpoint the Trainer saves gets ``headrace_loader_rank{R}.json`` (every rank
  writes its own: ``HeadraceCallback.on_save``): the loader's state after the last batch
  the Trainer took, which at a save is the last of the step it just finished (the Trainer
  pulls exactly ``gradient_accumulation_steps`` batches per step).
- ``train(resume_from_checkpoint=...)`` loads that state before training. The Trainer's own
  resume re-reads and drops the epoch's first batches (``accelerate.skip_first_batches``,
  which needs a ``DataLoader``); for a Headrace loader it is a check instead: the batches
  the Trainer counts as done in the epoch must be where the loader state is, else
  ``ConfigError``. (``transformers.trainer.skip_first_batches`` is wrapped once per
  process: a ``TrainerBatches`` gets the check, any other dataloader accelerate's skip.
  The Trainer has no hook there; the resume tests fail if a new transformers moves it.)
  ``args.ignore_data_skip=True`` keeps its meaning: no loader state is loaded, and the
  epoch restarts from its first batch.

With ``accelerate`` alone (a custom loop): ``accelerator.prepare(model, optimizer)`` and
iterate a ``headrace.torch.TorchLoader(pipeline, device=accelerator.device)`` (``prepare``
passes anything that is not a ``DataLoader`` through untouched); checkpoint it with
``save_loader_state(loader, dir)`` beside ``accelerator.save_state(dir)`` and resume with
``load_loader_state``. Not ``accelerator.register_for_checkpointing(loader)``: accelerate
writes custom objects from the main process only, and each rank's state is its own.
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, Iterator, Optional, Tuple, Union

import transformers
import transformers.trainer as _hf_trainer
from accelerate.utils import DistributedType
from transformers import PreTrainedModel, Trainer, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from ._headrace import ConfigError
from .loader import Loader
from .models import ModelInputs, plus_vision_dummy
from .pipeline import Pipeline
from .torch import TorchLoader, rank_checked

__all__ = ["HeadraceCallback", "HeadraceTrainer", "HeadraceTrainerMixin", "TrainerBatches",
           "data_parallel_layout", "load_loader_state", "loader_state_path",
           "save_loader_state"]

STATE_FILE = "headrace_loader_rank{rank}.json"


def loader_state_path(checkpoint_dir: Union[str, os.PathLike], rank: int) -> str:
    """Where rank ``rank``'s loader state lives in a checkpoint folder."""
    return os.path.join(os.fspath(checkpoint_dir), STATE_FILE.format(rank=rank))


def _rank_of(loader: Union[TorchLoader, Loader]) -> int:
    return (loader.loader if isinstance(loader, TorchLoader) else loader).rank


def save_loader_state(loader: Union[TorchLoader, Loader],
                      checkpoint_dir: Union[str, os.PathLike]) -> str:
    """Writes ``loader.state_dict()`` to this rank's file in ``checkpoint_dir`` (made if
    missing; written to a temporary name, then renamed). Returns the path."""
    path = loader_state_path(checkpoint_dir, _rank_of(loader))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(loader.state_dict(), f)
    os.replace(tmp, path)
    return path


def load_loader_state(loader: Union[TorchLoader, Loader],
                      checkpoint_dir: Union[str, os.PathLike]) -> Dict[str, Any]:
    """Loads this rank's state from ``checkpoint_dir`` into ``loader`` (the next ``for``
    continues the saved epoch); returns the state. A missing file is a ``ConfigError``
    naming it; a state from another pipeline or rank layout is refused by
    ``load_state_dict`` naming what differs."""
    path = loader_state_path(checkpoint_dir, _rank_of(loader))
    if not os.path.isfile(path):
        raise ConfigError(
            f"resume: {path}: no Headrace loader state in this checkpoint (it was saved "
            "without headrace.hf.HeadraceCallback, or by another rank count); resume from a "
            "checkpoint a HeadraceTrainer wrote, or set ignore_data_skip=True to restart the "
            "epoch from its first batch")
    state = _read_state_file(path)
    loader.load_state_dict(state)
    return state


def _read_state_file(path: str) -> Dict[str, Any]:
    """The JSON object in a loader state file; a file that is not one (truncated, empty,
    another encoding, nested past reason) is a ConfigError naming it."""
    try:
        with open(path, "rb") as f:
            state = json.loads(f.read().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ConfigError(
            f"resume: {path}: not a Headrace loader state ({type(error).__name__}: "
            f"{str(error)[:200]}); the file is damaged or was not written by "
            "headrace.hf.save_loader_state") from None
    if not isinstance(state, dict):
        raise ConfigError(
            f"resume: {path}: not a Headrace loader state (a JSON {type(state).__name__}, "
            "not an object)")
    return state


class TrainerBatches:
    """What ``get_train_dataloader`` returns: the Headrace loader as the Trainer drives a
    ``DataLoader`` (``len()``, ``set_epoch(e)``, one ``iter()`` per epoch), each batch
    passed through ``to_inputs`` (default: as is) on its way to the model's ``forward``.

    ``resumed`` (epoch, batch in it, state file), set when a checkpoint's state was
    loaded, is checked against what the Trainer counts: by ``skip_to(n)`` (the Trainer's
    skip of the resumed epoch's first ``n`` batches) and the first ``set_epoch``."""

    def __init__(self, loader: TorchLoader,
                 to_inputs: Optional[Callable[[Dict[str, Any]], Dict[str, Any]]] = None):
        self.loader = loader
        self.to_inputs = to_inputs
        self.resumed: Optional[Tuple[int, int, str]] = None  # (epoch, batch_in_epoch, file)

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        resumed, self.resumed = self.resumed, None
        if resumed is not None:
            saved_epoch, batch, path = resumed
            per_epoch = len(self.loader)
            expected = saved_epoch + 1 if batch >= per_epoch else saved_epoch
            if epoch != expected:
                raise ConfigError(
                    f"resume: the Trainer resumes in epoch {epoch}, but {path} holds epoch "
                    f"{saved_epoch}, batch {batch} of {per_epoch} (a loader state from another "
                    "checkpoint, or a different batch size or gradient_accumulation_steps)")
        self.loader.set_epoch(epoch)

    def skip_to(self, num_batches: int) -> "TrainerBatches":
        """The Trainer's ``skip_first_batches(self, n)`` on resume: the loader is there
        already (its state was loaded); checks it and returns this same loader."""
        if self.resumed is None:
            raise ConfigError(
                f"resume: the Trainer resumes {num_batches} batches into an epoch, but no "
                "Headrace loader state was loaded (HeadraceTrainerMixin.train loads it from "
                "the checkpoint; do not call the inner training loop directly)")
        epoch, batch, path = self.resumed
        if batch != num_batches:
            raise ConfigError(
                f"resume: the Trainer checkpoint is {num_batches} batches into its epoch, "
                f"but {path} is at batch {batch} of epoch {epoch} (a loader state from "
                "another checkpoint, or a different gradient_accumulation_steps)")
        return self

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        for batch in self.loader:
            yield batch if self.to_inputs is None else self.to_inputs(batch)


def _skip_first_batches_passthrough() -> None:
    """The Trainer's resume calls ``transformers.trainer.skip_first_batches`` (accelerate's)
    on the train dataloader. For ``TrainerBatches`` it becomes ``skip_to`` (a check, no
    replay); every other dataloader still gets accelerate's. Installed once, and correct
    for every Trainer in the process, Headrace's or not, so it is never taken back."""
    original = _hf_trainer.skip_first_batches
    if getattr(original, "_headrace_passthrough", False):
        return

    def skip_first_batches(dataloader, num_batches=0):
        if isinstance(dataloader, TrainerBatches):
            return dataloader.skip_to(num_batches)
        return original(dataloader, num_batches)

    skip_first_batches._headrace_passthrough = True
    skip_first_batches.__wrapped__ = original
    _hf_trainer.skip_first_batches = skip_first_batches


def _keep_fields(names) -> Callable[[Dict[str, Any]], Dict[str, Any]]:
    keep = frozenset(names)
    return lambda batch: {k: v for k, v in batch.items() if k in keep}


class HeadraceCallback(TrainerCallback):
    """Writes the loader's state into every checkpoint the Trainer saves (each rank its
    own file, ``headrace_loader_rank{R}.json``). ``HeadraceTrainerMixin`` adds it; alone
    it only writes the state (resuming from it is the mixin's ``train``)."""

    def __init__(self, loader: Union[TorchLoader, Loader]):
        self.loader = loader

    def on_save(self, args, state, control, **kwargs):
        # The folder Trainer._save_checkpoint just wrote (without hyperparameter search).
        save_loader_state(self.loader, os.path.join(
            args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"))
        return control


def data_parallel_layout(accelerator: Any) -> Tuple[int, int]:
    """This process's data-parallel rank and size as ``accelerate`` splits a ``DataLoader``
    (``accelerate.data_loader.prepare_data_loader``): the process index and count, and
    with a device mesh (``ParallelismConfig``) the tensor- and context-parallel peers
    sharing a rank (under DeepSpeed, the tensor-parallel ones)."""
    rank, size = accelerator.process_index, accelerator.num_processes
    # The mesh Accelerator.prepare_data_loader passes on (DeepSpeed's has its own).
    mesh = accelerator._prepare_device_mesh()
    if mesh is None:
        return rank, size
    names = tuple(mesh.mesh_dim_names or ())

    def dim(name: str) -> int:
        return mesh[name].size() if name in names else 1

    if accelerator.distributed_type == DistributedType.DEEPSPEED:
        return rank // dim("tp"), size // dim("tp")
    return rank // (dim("tp") * dim("cp")), dim("dp_shard") * dim("dp_replicate")


def _torch_loader(train_loader: Union[Pipeline, TorchLoader, Loader, str, os.PathLike],
                  args: transformers.TrainingArguments, accelerator: Any) -> TorchLoader:
    # The Trainer's data-parallel layout, as accelerate sees it.
    rank, world_size = data_parallel_layout(accelerator)
    if isinstance(train_loader, (TorchLoader, Loader)):
        return rank_checked(train_loader, rank, world_size, prefix="train_loader: ",
                            given_to="the Trainer's data-parallel",
                            how="pass the Pipeline instead, or make the loader with "
                                "headrace.hf.data_parallel_layout(trainer.accelerator)")
    if isinstance(train_loader, (Pipeline, str, os.PathLike)):
        # The batches go to the Trainer's device (on CUDA: overlapped copies, and
        # _prepare_inputs' .to is a no-op).
        device = args.device if args.device.type == "cuda" else None
        return TorchLoader(train_loader, device=device, rank=rank, world_size=world_size)
    raise ConfigError(
        f"train_loader: {type(train_loader).__name__}: expected a headrace.Pipeline, a "
        "pipeline YAML path, a headrace.Loader or a headrace.torch.TorchLoader")


class HeadraceTrainerMixin:
    """Makes a ``transformers.Trainer`` (or any subclass) train on a Headrace loader.

    ``train_loader``: a ``headrace.Pipeline`` or YAML path (a ``TorchLoader`` is made for
    this process's data-parallel rank and size as accelerate would split a ``DataLoader``,
    ``data_parallel_layout``: the process index and count, tensor- and context-parallel
    peers of a ``ParallelismConfig`` sharing a rank; on ``args.device`` when it is CUDA),
    or a ``Loader``/``TorchLoader`` made by the caller for that rank and size (another
    is a ``ConfigError``: it would read another rank's batches).
    ``to_inputs``: batch -> the keyword arguments of the model's ``forward`` (e.g. rename
    fields); default: for a transformers model ``headrace.models.ModelInputs(model)``, the
    batch as the model takes it (a packed batch's samples kept apart, a Qwen-VL model's
    M-RoPE positions, checked against the model at the first batch); then the fields that
    ``forward`` names (and the label names), as the Trainer treats a dataset's columns, or
    every field with ``remove_unused_columns=False``. ``train_dataset`` is not used.
    ``per_device_train_batch_size`` only feeds the Trainer's sample counts in its logs;
    the pipeline's ``batch_size`` is the batch.
    """

    def __init__(self, *args: Any,
                 train_loader: Union[Pipeline, TorchLoader, Loader, str, os.PathLike],
                 to_inputs: Optional[Callable[[Dict[str, Any]], Dict[str, Any]]] = None,
                 **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.headrace_loader = _torch_loader(train_loader, self.args, self.accelerator)
        self.headrace_batches = TrainerBatches(self.headrace_loader, to_inputs)
        self.add_callback(HeadraceCallback(self.headrace_loader))
        _skip_first_batches_passthrough()

    def get_train_dataloader(self) -> TrainerBatches:
        batches = self.headrace_batches
        if batches.to_inputs is None:
            # A transformers model gets the batch as its forward takes it
            # (headrace.models): packed rows with the position ids and no cache that keep
            # their samples apart, a Qwen-VL model's M-RoPE positions, checked against the
            # model at the first batch. Any other model gets the fields as they are.
            # With remove_unused_columns, as the Trainer does for a dataset's columns,
            # only the fields forward takes (and the label names); "index", "id" go.
            to_model = (ModelInputs(self.model, forward_args_only=False)
                        if isinstance(self.model, PreTrainedModel) else None)
            if self.args.remove_unused_columns:
                self._set_signature_columns_if_needed()
                columns = set(self._signature_columns)
                if to_model is not None and "use_cache" in to_model.accepted:
                    columns.add("use_cache")
                columns.add("dummy_kinds")  # compute_loss takes it out
                keep = _keep_fields(columns)
                batches.to_inputs = (keep if to_model is None
                                     else lambda batch: keep(to_model(batch)))
            else:
                batches.to_inputs = to_model
        return batches

    def compute_loss(self, model: Any, inputs: Dict[str, Any], *args: Any, **kwargs: Any):
        """The Trainer's loss, plus (batch.balance.every_rank) zero times the vision tower
        on a dummy image when the batch runs no vision tower: every rank then enters the
        tower's collectives each step under FSDP/ZeRO-3 (headrace.models.vision_dummy_loss)."""
        flags = inputs.pop("dummy_kinds", None)
        result = super().compute_loss(model, inputs, *args, **kwargs)
        if flags is None:
            return result
        unwrapped = self.accelerator.unwrap_model(model)
        if isinstance(result, tuple):
            return (plus_vision_dummy(result[0], unwrapped, inputs, flags),) + tuple(result[1:])
        return plus_vision_dummy(result, unwrapped, inputs, flags)

    def train(self, resume_from_checkpoint: Union[str, bool, None] = None, *args: Any,
              **kwargs: Any):
        checkpoint = resume_from_checkpoint
        if checkpoint is True:  # as Trainer.train resolves it (it raises when there is none)
            checkpoint = get_last_checkpoint(self.args.output_dir)
        if checkpoint and not self.args.ignore_data_skip:
            state = load_loader_state(self.headrace_loader, checkpoint)
            self.headrace_batches.resumed = (state["epoch"], state["batch_in_epoch"],
                                             loader_state_path(checkpoint,
                                                               _rank_of(self.headrace_loader)))
        return super().train(resume_from_checkpoint, *args, **kwargs)


class HeadraceTrainer(HeadraceTrainerMixin, Trainer):
    """``transformers.Trainer`` on a Headrace loader: see ``HeadraceTrainerMixin``."""
