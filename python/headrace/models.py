"""A batch as a model's ``forward`` takes it: what makes a packed (or unpadded) Qwen-VL
batch give each sample exactly the logits of its forward alone.

    import headrace.models, headrace.torch
    to_model = headrace.models.ModelInputs(model)       # a transformers model
    for batch in headrace.torch.TorchLoader(pipeline):
        loss = model(**to_model(batch)).loss

``HeadraceTrainer`` (``headrace.hf``) and ``HeadraceDataModule`` (``headrace.lightning``,
when the LightningModule holds a transformers model) apply it by default.

Why it is needed. A packed batch holds several samples in each row. A transformers model
keeps them apart only when all of these hold (transformers 5.x,
``masking_utils._preprocess_mask_arguments``): no ``attention_mask``, no cache
(``use_cache=False``: with the config's default ``True`` the model makes an empty cache
before it builds the mask, and then ignores the position ids), and ``position_ids`` whose
restarts mark the samples. A Qwen-VL model (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) takes
``position_ids`` as ``[4, rows, L]``: the text positions first (the restarts the mask is
built from), then its three M-RoPE rows; given ``[rows, L]`` it repeats the text
positions as its three rows (1-D RoPE on image tokens) and builds no packed mask, so
every sample attends to the samples before it in its row. Measured on tiny random models
(tests/python/test_model_inputs.py): a packed sample's logits differ from its forward
alone by up to 24-28 that way, and by < 1e-4 with these inputs.

What it hands the model, by the batch's layout:

- packed rows (``batch.pack``: ``samples_per_row``): ``input_ids``, ``labels`` as they
  are (each sample's first label is already ``-100``), ``position_ids`` ``[4, rows, L]``
  (``position_ids`` then ``mrope_position_ids`` permuted) for a Qwen-VL model, the text
  positions ``[rows, L]`` for any other; no ``attention_mask``; ``use_cache=False``.
- a token budget (``batch.max_tokens``: unpadded, ``cu_seqlens``): the samples as one
  packed row, ``[1, tokens]``, each sample's first label set to ``-100`` (as packing
  does), positions as packed rows.
- unpadded samples (``text.tokenize {pad: false}``, not packed): one row per sample,
  padded on the right (labels ``-100``), with ``attention_mask``; Qwen-VL positions
  ``[3, samples, L]``.
- padded samples (``pad: true``): as they are, with their ``attention_mask``; Qwen-VL
  positions ``[3, samples, L]``.
- vision: ``pixel_values``/``image_grid_thw`` and ``pixel_values_videos``/
  ``video_grid_thw`` (grids as int64; a padded item list's empty items dropped).

Checked at the first batch, for a Qwen-VL model, naming both sides (``ConfigError``): a
batch with images or videos but no ``mrope_position_ids`` (add ``vision.rope_index``); the
model's ``image_token_id``/``video_token_id`` against the vision tokens the grids need at
its ``spatial_merge_size``; the patch width against its ``patch_size``,
``temporal_patch_size`` and channels; the patches against the grids; the first sample's
M-RoPE positions against the model's own ``get_rope_index`` (the rope preset); and, for
packed layouts, that this transformers builds the packed mask from 4-row position ids.
"""
from __future__ import annotations

import inspect
from typing import Any, Dict, Mapping, Optional

import torch

from ._headrace import ConfigError

__all__ = ["ModelInputs", "QWEN_VL_FAMILIES", "model_inputs", "vision_dummy_loss",
           "forward_with_dummy", "plus_vision_dummy", "DUMMY_KINDS"]

# config.model_type of the models whose positions are M-RoPE (vision.rope_index presets).
QWEN_VL_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")

_VISION = (("pixel_values", "image_grid_thw"), ("pixel_values_videos", "video_grid_thw"))
# The kinds a batch's `dummy_kinds` field flags, in its order (batch.balance.every_rank).
DUMMY_KINDS = ("image", "video", "audio", "pointcloud")
_IGNORE = -100
# rope_deltas too (vision.rope_index's, one a sample): the Qwen-VL forwards of transformers
# < 5.8 name a rope_deltas argument (one a row, for generation) and ignore it; a packed
# batch's would not have the rows' shape.
_TOKEN_FIELDS = ("input_ids", "labels", "position_ids", "attention_mask", "mrope_position_ids",
                 "rope_deltas")


def _family(model: Any) -> Optional[str]:
    config = getattr(model, "config", None)
    return getattr(config, "model_type", None)


def _forward_args(model: Any) -> Optional[frozenset]:
    """The named parameters of ``model.forward`` (as the Trainer keeps a dataset's
    columns), and ``use_cache`` where ``**kwargs`` takes it (Qwen3-VL's forward names it
    there only); None when there is no model."""
    if model is None:
        return None
    parameters = inspect.signature(model.forward).parameters
    names = set(parameters)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        names.add("use_cache")
    return frozenset(names)


def _grid(t: torch.Tensor) -> torch.Tensor:
    """A grid field as the model takes it: ``[items, 3]`` int64. A padded item list's
    (``[samples, max_items, 3]``) empty items, all zero, are dropped; that is the one
    form whose item count depends on the values (a device sync on a GPU batch)."""
    padded = t.ndim == 3
    t = t.reshape(-1, 3).long()
    if padded:
        t = t[(t != 0).any(dim=1)]
    return t


def _segments(lengths: torch.Tensor, total: int):
    """For ragged rows of ``lengths`` (``total`` tokens, known from the field's shape, so
    no device sync): each token's sample, its place in it, and each sample's start."""
    lengths = lengths.long()
    sample = torch.repeat_interleave(torch.arange(lengths.numel(), device=lengths.device),
                                     lengths, output_size=total)
    starts = torch.cumsum(lengths, 0) - lengths
    place = torch.arange(total, device=lengths.device) - starts[sample]
    return sample, place, starts


class ModelInputs:
    """Callable: batch (a dict of torch tensors, as ``TorchLoader`` yields) -> the keyword
    arguments of ``model.forward`` (see the module's doc). ``model``: the transformers
    model (its config decides the position layout and is checked against the first
    batch); None converts by the batch alone (M-RoPE when it carries
    ``mrope_position_ids``) and checks nothing. ``forward_args_only``: keep only the
    fields ``forward`` names (as the HF Trainer's ``remove_unused_columns``); False keeps
    the batch's other fields beside them."""

    def __init__(self, model: Any = None, *, forward_args_only: bool = True):
        self.model = model
        self.family = _family(model)
        # What forward takes (None: no model); what it is cut to (None: everything).
        self.accepted = _forward_args(model)
        self.forward_args = self.accepted if forward_args_only else None
        self.checked = model is None

    @property
    def mrope(self) -> Optional[bool]:
        """Whether the model takes M-RoPE positions; None: decided by the batch."""
        if self.model is None:
            return None
        return self.family in QWEN_VL_FAMILIES

    def __call__(self, batch: Mapping[str, Any]) -> Dict[str, Any]:
        out = self.convert(batch)
        if not self.checked:
            self.check(batch, out)
            self.checked = True
        return out

    # --- layout ---------------------------------------------------------------------

    def convert(self, batch: Mapping[str, Any]) -> Dict[str, Any]:
        mrope = self.mrope
        if mrope is None:
            mrope = "mrope_position_ids" in batch
        ids = batch.get("input_ids")
        if ids is None:  # no tokens: nothing to lay out, the fields pass as they are
            out = {}
        elif "samples_per_row" in batch:
            out = self._packed(batch, mrope)
        elif ids.ndim == 1 and "cu_seqlens" in batch:
            out = self._one_row(batch, mrope)
        elif ids.ndim == 1:
            out = self._padded_rows(batch, mrope)
        else:
            out = self._as_padded(batch, mrope)
        empty = set()
        for pixels, grid in _VISION:  # the patches pass as they are, with the rest below
            if grid in batch:
                out[grid] = _grid(batch[grid])
                if out[grid].shape[0] == 0:
                    # No image (video) in the whole batch: the model must not be given an
                    # empty one (its vision tower fails on no grid at all).
                    empty.update((pixels, grid))
        # The token fields are the layout's own: a raw one (ragged, or the text
        # positions of packed rows) never reaches the model beside it.
        laid = _TOKEN_FIELDS if ids is not None else ()
        out = {**{k: v for k, v in batch.items() if k not in out and k not in laid}, **out}
        out = {k: v for k, v in out.items() if k not in empty}
        if self.forward_args is None:
            return out
        return {k: v for k, v in out.items() if k in self.forward_args}

    @staticmethod
    def _positions(text: torch.Tensor, batch: Mapping[str, Any], mrope: bool,
                   packed: bool) -> torch.Tensor:
        """``text`` ([rows, L]) as the model's position_ids: itself, or with M-RoPE
        ``[4, rows, L]`` when packed (text first: the mask's restarts) and
        ``[3, rows, L]`` otherwise."""
        text = text.long()
        if not mrope:
            return text
        if "mrope_position_ids" in batch:
            rope = batch["mrope_position_ids"].long()
            rope = rope.reshape(*text.shape, 3).permute(2, 0, 1)
        else:  # text only: its three rows are the text positions
            rope = text.unsqueeze(0).expand(3, -1, -1)
        if packed:
            return torch.cat([text.unsqueeze(0), rope], 0)
        return rope.contiguous()

    def _packed(self, batch: Mapping[str, Any], mrope: bool) -> Dict[str, Any]:
        ids = batch["input_ids"]
        if "position_ids" not in batch:
            raise ConfigError(
                "model inputs: a packed batch without position_ids: the samples' restarts "
                "are what keeps them apart in the model (text.tokenize pad: false writes them)")
        text = batch["position_ids"]
        out = {"input_ids": ids.long(), "position_ids": self._positions(text, batch, mrope, True),
               "use_cache": False}
        if "labels" in batch:
            out["labels"] = batch["labels"].long()
        return out

    def _one_row(self, batch: Mapping[str, Any], mrope: bool) -> Dict[str, Any]:
        ids = batch["input_ids"]
        lengths = batch["input_ids_lengths"]
        sample, place, starts = _segments(lengths, ids.numel())
        text = batch["position_ids"] if "position_ids" in batch else place
        out = {"input_ids": ids.long().unsqueeze(0),
               "position_ids": self._positions(text.reshape(1, -1), batch, mrope, True),
               "use_cache": False}
        if "labels" in batch:
            # As packing does: each sample's first label ignored, so that no label is
            # predicted across samples. One slot past the end takes an empty last
            # sample's start (no boolean mask: no device sync).
            labels = batch["labels"].long()
            labels = torch.cat([labels, labels.new_full((1,), _IGNORE)])
            labels[starts] = _IGNORE
            out["labels"] = labels[:-1].unsqueeze(0)
        return out

    def _padded_rows(self, batch: Mapping[str, Any], mrope: bool) -> Dict[str, Any]:
        ids = batch["input_ids"]
        lengths = batch["input_ids_lengths"]
        sample, place, _ = _segments(lengths, ids.numel())
        rows, width = lengths.numel(), int(lengths.max()) if lengths.numel() else 0

        def spread(values: torch.Tensor, fill: int) -> torch.Tensor:
            values = values.long()
            shape = (rows, width) + tuple(values.shape[1:])
            t = torch.full(shape, fill, dtype=torch.long, device=values.device)
            t[sample, place] = values
            return t

        mask = torch.zeros(rows, width, dtype=torch.long, device=ids.device)
        mask[sample, place] = 1
        out = {"input_ids": spread(ids, 0), "attention_mask": mask, "use_cache": False}
        if "labels" in batch:
            out["labels"] = spread(batch["labels"], _IGNORE)
        if mrope and "mrope_position_ids" in batch:
            out["position_ids"] = spread(batch["mrope_position_ids"], 1).permute(2, 0, 1)
        elif "position_ids" in batch:
            text = spread(batch["position_ids"], 1)
            out["position_ids"] = self._positions(text, {}, mrope, False)
        return out

    def _as_padded(self, batch: Mapping[str, Any], mrope: bool) -> Dict[str, Any]:
        ids = batch["input_ids"]
        out = {"input_ids": ids.long(), "use_cache": False}
        if "attention_mask" in batch:
            out["attention_mask"] = batch["attention_mask"].long()
        if "labels" in batch:
            out["labels"] = batch["labels"].long()
        if mrope and "mrope_position_ids" in batch:
            out["position_ids"] = batch["mrope_position_ids"].long().permute(2, 0, 1)
        return out

    # --- checks ---------------------------------------------------------------------

    def check(self, batch: Mapping[str, Any], out: Mapping[str, Any]) -> None:
        """The first batch against the model (see the module's doc); ConfigError naming
        the model's value and the batch's."""
        if self.family not in QWEN_VL_FAMILIES or "input_ids" not in batch:
            return
        config = self.model.config
        name = type(self.model).__name__
        vision = getattr(config, "vision_config", None)
        merge = int(getattr(vision, "spatial_merge_size", 2))
        has_vision = any(grid in batch for _, grid in _VISION)
        if has_vision and "mrope_position_ids" not in batch:
            raise ConfigError(
                f"model inputs: {name} ({self.family}) places image and video tokens by "
                "M-RoPE positions, and the batch has grids but no mrope_position_ids: add "
                f"`vision.rope_index: {{preset: {self.family.replace('_moe', '')}}}` after "
                "text.tokenize")
        ids = batch["input_ids"]
        for (pixels, grid), token in zip(_VISION, ("image_token_id", "video_token_id")):
            if grid not in batch:
                continue
            grids = _grid(batch[grid])
            need = int((grids.prod(dim=1) // (merge * merge)).sum())
            token_id = getattr(config, token, None)
            have = int((ids == token_id).sum()) if token_id is not None else 0
            if have != need:
                raise ConfigError(
                    f"model inputs: the batch's {grid} need {need} vision tokens at the "
                    f"model's spatial_merge_size {merge}, and its input_ids hold {have} of "
                    f"the model's {token} {token_id} ({name}): the tokenizer's preset and "
                    "vision ops were made for another model (text.tokenize preset / "
                    "image_token, vision.patchify preset / merge_size)")
            if pixels in batch:
                patches = batch[pixels]
                channels = int(getattr(vision, "in_channels", getattr(vision, "in_chans", 3)))
                width = (channels * int(vision.temporal_patch_size) * int(vision.patch_size) ** 2)
                if patches.shape[-1] != width:
                    raise ConfigError(
                        f"model inputs: {pixels} rows hold {patches.shape[-1]} values, the "
                        f"model's patches {width} (in_channels {channels} x "
                        f"temporal_patch_size {vision.temporal_patch_size} x patch_size "
                        f"{vision.patch_size}^2, {name}): vision.patchify's preset or "
                        "patch_size is another model's")
                total = int(grids.prod(dim=1).sum())
                if patches.shape[0] != total:
                    raise ConfigError(
                        f"model inputs: {pixels} holds {patches.shape[0]} patches and "
                        f"{grid} needs {total}")
        self._check_rope(batch)
        position_ids = out.get("position_ids")
        if position_ids is not None and position_ids.ndim == 3 and position_ids.shape[0] == 4:
            self._check_packed_support(name)

    def _check_rope(self, batch: Mapping[str, Any]) -> None:
        """The first sample's M-RoPE positions against the model's get_rope_index (a
        vision.rope_index preset of another model, or another merge size, differs)."""
        if "mrope_position_ids" not in batch or "input_ids_lengths" not in batch:
            return
        inner = getattr(self.model, "model", self.model)
        get_rope_index = getattr(inner, "get_rope_index", None)
        if get_rope_index is None:
            return
        if self.family == "qwen2_5_vl" and "video_grid_thw" in batch:
            return  # its video positions need the seconds per grid, which the batch lacks
        length = int(batch["input_ids_lengths"][0])
        if length == 0:
            return
        ids = batch["input_ids"].reshape(-1)[:length]  # packed: row 0 starts with it
        mine = batch["mrope_position_ids"].reshape(-1, 3)[:length].long()
        config = self.model.config
        kwargs = {}
        counts = {"image_grid_thw": "images_count", "video_grid_thw": "videos_count"}
        for grid, token in (("image_grid_thw", "image_token_id"),
                            ("video_grid_thw", "video_token_id")):
            if grid not in batch:
                continue
            token_id = getattr(config, token, None)
            if token_id is None or not bool((ids == token_id).any()):
                continue
            grids = batch[grid].reshape(-1, 3).long()
            count = counts[grid]
            if count in batch:
                grids = grids[:int(batch[count].reshape(-1)[0])]
            elif grids.shape[0] > 1:
                return  # which grids are the first sample's is not told
            kwargs[grid] = _grid(grids).cpu()
        x = ids.long().cpu().unsqueeze(0)
        mm = torch.zeros_like(x, dtype=torch.int32)
        mm[x == getattr(config, "image_token_id", -1)] = 1
        mm[x == getattr(config, "video_token_id", -1)] = 2
        try:
            with torch.no_grad():
                want, _ = get_rope_index(x, mm, **kwargs)
        except TypeError:
            return  # another transformers' signature: the other checks still hold
        want = want[:, 0].T.to(mine.device)
        if not torch.equal(want, mine):
            first = int((want != mine).any(dim=1).nonzero()[0])
            raise ConfigError(
                f"model inputs: the first sample's mrope_position_ids differ from "
                f"{type(self.model).__name__}.get_rope_index's at token {first} "
                f"({mine[first].tolist()} against {want[first].tolist()}): "
                "vision.rope_index's preset or merge_size is another model's "
                f"(the model is {self.family})")

    def _check_packed_support(self, name: str) -> None:
        """Whether this transformers builds a packed mask from 4-row position ids: the
        language model's forward must split off the text row. No public API says so; the
        forward's source is read (transformers 5.x does it, ``position_ids.shape[0] == 4``)."""
        import transformers
        from transformers import masking_utils
        inner = getattr(self.model, "model", self.model)
        language = getattr(inner, "language_model", None)
        try:
            source = inspect.getsource(type(language).forward) if language is not None else ""
        except (OSError, TypeError):
            source = ""
        if ("shape[0] == 4" not in source
                or not hasattr(masking_utils, "find_packed_sequence_indices")):
            raise ConfigError(
                f"model inputs: transformers {transformers.__version__}'s {name} does not "
                "build a packed-sequence mask from position ids, so packed samples would "
                "attend to each other: use transformers >= 5 (its masking_utils "
                "find_packed_sequence_indices and 4-row Qwen-VL position ids), or "
                "leave batch.pack and batch.max_tokens out")


def model_inputs(batch: Mapping[str, Any], model: Any = None) -> Dict[str, Any]:
    """``ModelInputs(model)(batch)``: one batch's forward arguments, checked against the
    model. In a loop, make one ``ModelInputs`` (it checks the first batch only)."""
    return ModelInputs(model)(batch)


def _tensors(value: Any):
    """The tensors in a module's output (a tensor, a tuple or list, a ModelOutput)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v)


def vision_dummy_loss(model: Any, batch: Mapping[str, Any]) -> Optional[torch.Tensor]:
    """Zero times the vision tower's output on one dummy image, for a batch whose forward
    runs no vision tower: add it to the loss so that every rank runs the tower's
    collectives each step under FSDP or ZeRO-3 (a rank that skips them while the others
    enter them hangs the job). None when nothing is to add: the batch carries no
    ``dummy_kinds`` (``batch.balance.every_rank``) or flags neither image nor video, or it
    holds patches for the tower anyway, or the model is not a Qwen-VL model.

    The dummy is one merge unit of zero patches (grid ``[1, merge, merge]``) in the tower's
    dtype and device: its output is finite, so the gradients it adds are exactly zero and
    the loss is unchanged. ``HeadraceTrainer`` adds it by default (docs/balanced_steps.md)."""
    flags = batch.get("dummy_kinds")
    if flags is None or _family(model) not in QWEN_VL_FAMILIES:
        return None
    # Shapes first: reading the flags of a batch on the GPU waits for the device.
    for pixels, _ in _VISION:
        if pixels in batch and batch[pixels].numel() > 0:
            return None
    flags = [int(v) for v in flags.tolist()]
    if not (flags[DUMMY_KINDS.index("image")] or flags[DUMMY_KINDS.index("video")]):
        return None
    visual = getattr(getattr(model, "model", model), "visual", None)
    if visual is None:
        return None
    vision = model.config.vision_config
    merge = vision.spatial_merge_size
    channels = getattr(vision, "in_channels", None) or getattr(vision, "in_chans", 3)
    width = channels * vision.temporal_patch_size * vision.patch_size ** 2
    weight = next(visual.parameters())
    pixels = torch.zeros(merge * merge, width, dtype=weight.dtype, device=weight.device)
    grid = torch.tensor([[1, merge, merge]], dtype=torch.int64, device=weight.device)
    out = visual(pixels, grid_thw=grid)
    return sum(t.float().sum() for t in _tensors(out)) * 0.0


def forward_with_dummy(model: Any, batch: Mapping[str, Any]) -> Any:
    """``model(**batch)`` with ``dummy_kinds`` taken out of the arguments, its loss plus
    ``vision_dummy_loss(model, batch)`` when that adds something: a training step's
    forward that keeps every rank in the vision tower's collectives (FSDP, ZeRO-3). What
    a LightningModule's ``training_step`` calls on ``HeadraceDataModule``'s batches, which
    keep ``dummy_kinds`` under ``batch.balance.every_rank``
    (``return headrace.models.forward_with_dummy(self.model, batch).loss``); a batch
    without it is a plain forward."""
    inputs = dict(batch)
    flags = inputs.pop("dummy_kinds", None)
    out = model(**inputs)
    if getattr(out, "loss", None) is not None:
        out.loss = plus_vision_dummy(out.loss, model, inputs, flags)
    return out


def plus_vision_dummy(loss: torch.Tensor, model: Any, inputs: Mapping[str, Any],
                      flags: Any) -> torch.Tensor:
    """``loss`` plus ``vision_dummy_loss`` of the batch ``inputs`` (the forward's arguments)
    with its ``dummy_kinds`` ``flags`` (None: none), in the loss's dtype; ``loss`` itself
    when that adds nothing. ``forward_with_dummy`` and ``HeadraceTrainer.compute_loss``."""
    if flags is None:
        return loss
    dummy = vision_dummy_loss(model, {**inputs, "dummy_kinds": flags})
    return loss if dummy is None else loss + dummy.to(loss.dtype)
