"""Headrace under Megatron: the data-parallel rank and size from Megatron-Core's
``parallel_state``, the same batches for the tensor-, context- and pipeline-parallel peers
of one DP rank, and a provider where Megatron builds its data iterators.

    import headrace, headrace.megatron
    provider = headrace.megatron.datasets_provider(train=pipeline, valid=val_pipeline)
    pretrain(provider, model_provider, ModelType.encoder_or_decoder, forward_step,
             args_defaults={"dataloader_type": "external"})

Megatron-LM's ``build_train_valid_test_data_iterators`` calls the provider with its sample
counts (unused: the pipeline's epochs and Megatron's ``--train-iters`` bound the run) and,
with ``--dataloader-type external``, uses what it returns as the iterators: ``next()`` once
per micro-batch. ``provider.is_distributed`` is True, so Megatron calls it on every rank
(not only on tensor-parallel rank 0) and the provider decides who reads:

- ``pipeline_stages="first_last"`` (default, as Megatron's ``get_batch`` and its multimodal
  example): the first and the last pipeline stage read (tokens in, labels and loss mask
  out); the stages between get ``None`` iterators. ``"all"``: every stage reads.
- ``tensor_parallel="all"`` (default): each tensor-parallel rank reads the same batches
  itself (for a ``forward_step`` that does not broadcast: ragged VLM fields, which
  ``get_batch_on_this_tp_rank`` cannot send). ``"first"``: only TP rank 0 reads and the
  others get ``None``, for the ``get_batch`` that broadcasts over the TP group.
- Context-parallel peers share their DP rank, so they read the same batches too (Megatron
  slices the sequence after ``get_batch``). The DP rank and size are
  ``get_data_parallel_rank()``/``get_data_parallel_world_size()`` (without CP).

The iterators (``MegatronBatches``) run epoch after epoch without end (Megatron counts
iterations, not epochs). Resume: Megatron's ``--dataloader-save DIR`` calls ``save_state()``
on the train iterator of each DP rank's first TP and PP rank and writes it to
``DIR/iter_{N:07d}/mp_rank_00[_000]/train_dataloader_dprank{D:03d}.pt``;
``datasets_provider(..., train_state=headrace.megatron.saved_state(DIR, N))`` reads it
back (``args.dataloader_save``, ``args.iteration`` once Megatron loaded the checkpoint).
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, Iterator, Optional, Tuple, Union

from ._headrace import ConfigError
from .loader import Loader
from .pipeline import Pipeline
from .torch import TorchLoader, rank_checked

__all__ = ["MegatronBatches", "datasets_provider", "layout", "packed_seq_params", "reads_data",
           "saved_state", "saved_state_path"]

PIPELINE_STAGES = ("first_last", "all")
TENSOR_PARALLEL = ("all", "first")

Source = Union[Pipeline, TorchLoader, Loader, str, os.PathLike]
State = Union[None, Dict[str, Any], Callable[[int], Optional[Dict[str, Any]]]]


def _parallel_state(parallel_state: Any = None) -> Any:
    """``megatron.core.parallel_state``, or any object with its functions (a test's)."""
    if parallel_state is None:
        from megatron.core import parallel_state
    if not parallel_state.model_parallel_is_initialized():
        raise ConfigError(
            "megatron: parallel_state is not initialized: call "
            "megatron.core.parallel_state.initialize_model_parallel(...) (Megatron's "
            "initialize_megatron does) before making the data iterators")
    return parallel_state


def layout(parallel_state: Any = None) -> Dict[str, Any]:
    """This rank's place in Megatron's grid: ``dp_rank``, ``dp_size`` (without context
    parallelism), ``tp_rank``, ``cp_rank``, ``cp_size``, ``pp_rank``, ``pp_size``,
    ``first_stage``, ``last_stage``."""
    ps = _parallel_state(parallel_state)
    return {
        "dp_rank": ps.get_data_parallel_rank(),
        "dp_size": ps.get_data_parallel_world_size(),
        "tp_rank": ps.get_tensor_model_parallel_rank(),
        "cp_rank": ps.get_context_parallel_rank(),
        "cp_size": ps.get_context_parallel_world_size(),
        "pp_rank": ps.get_pipeline_model_parallel_rank(),
        "pp_size": ps.get_pipeline_model_parallel_world_size(),
        "first_stage": ps.is_pipeline_first_stage(ignore_virtual=True),
        "last_stage": ps.is_pipeline_last_stage(ignore_virtual=True),
    }


def _check_choice(key: str, value: Any, allowed: Tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"megatron: {key}: {value!r}: allowed values: {', '.join(allowed)}")


def reads_data(parallel_state: Any = None, *, pipeline_stages: str = "first_last",
               tensor_parallel: str = "all") -> bool:
    """Whether this rank reads batches under these choices (see the module's docs)."""
    _check_choice("pipeline_stages", pipeline_stages, PIPELINE_STAGES)
    _check_choice("tensor_parallel", tensor_parallel, TENSOR_PARALLEL)
    where = layout(parallel_state)
    if pipeline_stages == "first_last" and not (where["first_stage"] or where["last_stage"]):
        return False
    return tensor_parallel == "all" or where["tp_rank"] == 0


class MegatronBatches:
    """An endless iterator over a DP rank's batches, epoch after epoch (``next()`` past the
    end of an epoch starts the next; past the pipeline's last epoch, when its ``epochs`` is
    set, the loader's ``ConfigError`` naming the range), each through ``to_inputs``
    (default: as is). ``save_state()``/``restore_state(state)`` (Megatron's
    ``--dataloader-save`` calls the first) are the loader's ``state_dict``/
    ``load_state_dict``: the position after the batch handed out last."""

    def __init__(self, loader: TorchLoader,
                 to_inputs: Optional[Callable[[Dict[str, Any]], Any]] = None):
        self.loader = loader
        self.to_inputs = to_inputs
        self._epoch: Optional[Iterator[Dict[str, Any]]] = None

    def __iter__(self) -> "MegatronBatches":
        return self

    def __next__(self) -> Dict[str, Any]:
        for _ in range(2):  # the rest of this epoch, else the first batch of the next
            if self._epoch is None:
                self._epoch = iter(self.loader)
            try:
                batch = next(self._epoch)
            except StopIteration:
                self._epoch = None
                continue
            return batch if self.to_inputs is None else self.to_inputs(batch)
        # Two ends in a row: an epoch without batches for this rank.
        raise ConfigError(
            f"megatron: DP rank {self.loader.loader.rank} of {self.loader.loader.world_size} "
            f"has no batches in epoch {self.loader.epoch} (fewer samples than ranks?)")

    def __len__(self) -> int:
        """Batches per epoch on this DP rank."""
        return len(self.loader)

    def save_state(self) -> Dict[str, Any]:
        return self.loader.state_dict()

    def restore_state(self, state: Dict[str, Any]) -> None:
        self.loader.load_state_dict(state)
        self._epoch = None

    state_dict = save_state
    load_state_dict = restore_state

    def close(self) -> None:
        self.loader.close()


def saved_state_path(dataloader_save: Union[str, os.PathLike], iteration: int, dp_rank: int,
                     pipeline_parallel: bool) -> str:
    """Where Megatron-LM's ``maybe_save_dataloader_state`` writes a DP rank's state (its
    ``get_checkpoint_name`` with tensor rank 0 and pipeline rank 0)."""
    folder = "mp_rank_00_000" if pipeline_parallel else "mp_rank_00"
    return os.path.join(os.fspath(dataloader_save), f"iter_{iteration:07d}", folder,
                        f"train_dataloader_dprank{dp_rank:03d}.pt")


def saved_state(dataloader_save: Union[str, os.PathLike, None], iteration: int,
                parallel_state: Any = None) -> Callable[[int], Optional[Dict[str, Any]]]:
    """``train_state=`` for ``datasets_provider``: reads the DP rank's state that Megatron's
    ``--dataloader-save`` wrote at ``iteration``; None (start at the beginning) when
    ``dataloader_save`` is unset or ``iteration`` is 0. A missing file is a ``ConfigError``
    naming it, not a silent restart."""
    def load(dp_rank: int) -> Optional[Dict[str, Any]]:
        if not dataloader_save or iteration == 0:
            return None
        import torch
        pp_size = _parallel_state(parallel_state).get_pipeline_model_parallel_world_size()
        path = saved_state_path(dataloader_save, iteration, dp_rank, pp_size > 1)
        if not os.path.isfile(path):
            raise ConfigError(
                f"megatron: resume: {path}: no dataloader state for DP rank {dp_rank} at "
                f"iteration {iteration} (saved without --dataloader-save, or by another "
                "DP size)")
        # The state is plain data (dicts, lists, numbers, strings): weights_only refuses
        # anything else, so a checkpoint folder from elsewhere cannot run code on resume.
        try:
            saved = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # torch raises UnpicklingError, EOFError, RuntimeError
            raise ConfigError(
                f"megatron: resume: {path}: not a dataloader state of plain data "
                f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})"
                "; refused without running what it holds") from None
        if not isinstance(saved, dict) or "dataloader_state_dict" not in saved:
            raise ConfigError(
                f"megatron: resume: {path}: no dataloader_state_dict in it (holds "
                f"{type(saved).__name__})")
        return saved["dataloader_state_dict"]
    return load


def _torch_loader(source: Source, dp_rank: int, dp_size: int, device: Any) -> TorchLoader:
    if isinstance(source, (TorchLoader, Loader)):
        return rank_checked(source, dp_rank, dp_size, prefix="megatron: ",
                            given_to="data-parallel", device=device,
                            how="pass the Pipeline instead, or make the loader with "
                                "parallel_state's DP rank and size")
    if isinstance(source, (Pipeline, str, os.PathLike)):
        return TorchLoader(source, device=device, rank=dp_rank, world_size=dp_size)
    raise ConfigError(
        f"megatron: {type(source).__name__}: expected a headrace.Pipeline, a pipeline YAML "
        "path, a headrace.Loader or a headrace.torch.TorchLoader")


def datasets_provider(train: Optional[Source], valid: Optional[Source] = None,
                      test: Optional[Source] = None, *, pipeline_stages: str = "first_last",
                      tensor_parallel: str = "all", device: Any = "cuda",
                      to_inputs: Optional[Callable[[Dict[str, Any]], Any]] = None,
                      train_state: State = None, parallel_state: Any = None
                      ) -> Callable[[Any], Tuple[Optional[MegatronBatches], ...]]:
    """Megatron's ``train_valid_test_datasets_provider`` for ``--dataloader-type external``:
    ``provider(train_val_test_num_samples)`` returns ``(train, valid, test)``, each a
    ``MegatronBatches`` on a rank that reads, else None (also for a split not given).

    ``device``: where batches go (``"cuda"``: the current CUDA device, copied ahead on a
    side stream; ``None``: host tensors). ``to_inputs``: batch -> what ``next()`` returns
    (e.g. Megatron's ``tokens``/``labels``/``loss_mask``/``position_ids`` from Headrace's
    ``input_ids``/``labels``/``attention_mask``); default: the batch. ``train_state``: the
    DP rank's saved state, or a function of the DP rank giving it
    (``saved_state(args.dataloader_save, args.iteration)``). ``parallel_state``:
    Megatron-Core's by default.
    """
    _check_choice("pipeline_stages", pipeline_stages, PIPELINE_STAGES)
    _check_choice("tensor_parallel", tensor_parallel, TENSOR_PARALLEL)

    def provider(train_val_test_num_samples: Any = None) -> Tuple[Optional[MegatronBatches], ...]:
        if not reads_data(parallel_state, pipeline_stages=pipeline_stages,
                          tensor_parallel=tensor_parallel):
            return None, None, None
        where = layout(parallel_state)
        dp_rank, dp_size = where["dp_rank"], where["dp_size"]
        target = device
        if target == "cuda":
            import torch
            target = torch.device("cuda", torch.cuda.current_device())
        out = []
        for source in (train, valid, test):
            out.append(None if source is None else
                       MegatronBatches(_torch_loader(source, dp_rank, dp_size, target),
                                       to_inputs))
        state = train_state(dp_rank) if callable(train_state) else train_state
        if state is not None and out[0] is not None:
            out[0].restore_state(state)
        return tuple(out)

    provider.is_distributed = True  # Megatron: call on every rank, not only TP rank 0
    return provider


def packed_seq_params(batch: Dict[str, Any]) -> Any:
    """A packed batch's (``batch.pack`` or ``batch.max_tokens``) segments as Megatron-Core
    attends over them: ``PackedSeqParams(qkv_format="thd", ...)`` from its ``cu_seqlens``
    (every sample a segment, a packed row's padding one more), for a ``forward_step`` that
    passes ``packed_seq_params=`` to a Megatron-Core model with the tokens flattened to one
    sequence. Without it a Megatron model attends across the samples of a row, as a
    transformers model did without ``headrace.models.ModelInputs``. A Qwen-VL model's
    M-RoPE ids are ``batch["mrope_position_ids"]`` permuted to ``[3, rows, L]``
    (``headrace.models.ModelInputs`` lays them out for transformers models)."""
    from megatron.core.packed_seq_params import PackedSeqParams
    if "cu_seqlens" not in batch:
        raise ConfigError(
            "megatron: packed_seq_params needs a packed batch (batch.pack or "
            f"batch.max_tokens: cu_seqlens); this one has {', '.join(sorted(batch))}")
    cu = batch["cu_seqlens"].int()
    longest = int((cu[1:] - cu[:-1]).max()) if cu.numel() > 1 else 0
    return PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu,
                           max_seqlen_q=longest, max_seqlen_kv=longest)
