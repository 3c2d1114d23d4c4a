"""Packed and unpadded Qwen-VL batches inside real models (issue 47): every sample's logits
equal its forward alone, through every documented path.

The models: transformers' Qwen2VLForConditionalGeneration, Qwen2_5_VLForConditionalGeneration
and Qwen3VLForConditionalGeneration from tiny configs (two layers, random weights with
initializer_range 0.2, so that a wrong mask or position moves the logits by whole units;
the real token ids). The pipeline: the Qwen-VL chain of tests/python/test_packing.py (0 to
3 images per sample, text-only samples among them, several turns, Qwen2's tokenizer.json
with the Qwen2-VL chat template, vision.rope_index), and a video chain (test_vlm_video.py's
clips).

The reference is each sample alone as transformers runs it with nothing of ours: its
input_ids, pixel_values and grids (from the unpacked batch, which equals the processor's:
test_vlm_processor.py), ``mm_token_type_ids``, and no position ids, so the model computes
its own M-RoPE (get_rope_index). Asserted, per preset:
  - packed rows (windows 0 and 8), a token budget (max_tokens), unpadded rows and padded
    rows through ``headrace.models.ModelInputs``: each sample's logits within 1e-3 of
    alone; the loss the per-sample losses' token-weighted mean;
  - the same packed batch as the trainer got it before (text ``position_ids [rows, L]``,
    no ``use_cache``): logits off by more than 1 (the test can fail);
  - ``headrace.hf.HeadraceTrainer``: one step's gradients on the packed batch equal the
    unpadded batch's (the same samples), and the Trainer's loss the reference's;
  - ``headrace.lightning.HeadraceDataModule`` with the model in a LightningModule: the
    batch ``training_step`` gets gives each sample's logits;
  - a batch that does not fit the model fails at the first batch naming both sides: no
    M-RoPE ids, another image token, another patch size, another rope preset.
"""
import json
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import headrace
import headrace.models
import token_rows
from conftest import fetch_vocabs
from headrace.torch import TorchLoader

from transformers import (Qwen2VLConfig, Qwen2_5_VLConfig, Qwen3VLConfig,  # noqa: E402
                          Qwen2VLForConditionalGeneration,
                          Qwen2_5_VLForConditionalGeneration,
                          Qwen3VLForConditionalGeneration)

ops = headrace.ops
REPO = Path(__file__).resolve().parents[2]
TOKENIZER = REPO / "data/vocabs/qwen2/tokenizer.json"
TEMPLATE = (REPO / "tests/python/data/chat_templates/Qwen2-VL-7B-Instruct.jinja").read_text()
PRESETS = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]
SAMPLES = 10
BATCH = 5
SEQ_LEN = 512
TOLERANCE = 1e-3
FPS = 2

fetch_vocabs()


def tiny_model(preset, seed=0):
    """The preset's model, tiny but real: 2 text layers, a vision tower of depth 1
    (Qwen3-VL's with a deepstack layer), weights drawn with std 0.2."""
    torch.manual_seed(seed)
    text = dict(vocab_size=151936, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, initializer_range=0.2,
                tie_word_embeddings=False)
    if preset == "qwen2_vl":
        config = Qwen2VLConfig(
            text_config={**text, "rope_scaling": {"type": "mrope", "mrope_section": [2, 1, 1]}},
            vision_config=dict(depth=1, embed_dim=32, num_heads=2, hidden_size=32, mlp_ratio=1,
                               initializer_range=0.2),
            initializer_range=0.2)
        model = Qwen2VLForConditionalGeneration(config)
    elif preset == "qwen2_5_vl":
        config = Qwen2_5_VLConfig(
            text_config={**text, "rope_scaling": {"type": "mrope", "mrope_section": [2, 1, 1]}},
            vision_config=dict(depth=1, hidden_size=32, num_heads=2, intermediate_size=32,
                               out_hidden_size=32, tokens_per_second=2, initializer_range=0.2,
                               fullatt_block_indexes=[0], window_size=56),
            initializer_range=0.2)
        model = Qwen2_5_VLForConditionalGeneration(config)
    else:
        config = Qwen3VLConfig(
            text_config={**text, "head_dim": 8, "rope_scaling": {
                "rope_type": "default", "mrope_section": [2, 1, 1], "mrope_interleaved": True}},
            vision_config=dict(depth=1, hidden_size=32, num_heads=2, intermediate_size=32,
                               out_hidden_size=32, deepstack_visual_indexes=[0],
                               initializer_range=0.2),
            initializer_range=0.2)
        model = Qwen3VLForConditionalGeneration(config)
    assert (model.config.image_token_id, model.config.video_token_id) == (151655, 151656)
    return model.eval()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """SAMPLES conversations: 0 to 3 images (of 5 sizes), 1 to 3 turns, text-only ones
    among them."""
    root = tmp_path_factory.mktemp("model_inputs")
    (root / "images").mkdir()
    rng = np.random.default_rng(11)
    sizes = [(120, 90), (56, 56), (200, 60), (64, 160), (140, 140)]
    names = []
    for k, (w, h) in enumerate(sizes):
        name = f"images/p{k}.png"
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(root / name)
        names.append(name)
    lines = []
    for i in range(SAMPLES):
        n = [1, 0, 2, 3, 1][i % 5]
        turns = []
        for t in range(1 + i % 3):
            question = f"Question {t} about case {i}: " + "why " * int(rng.integers(1, 8))
            if t == 0 and n:
                question = "<image>\n" * n + question
            turns += [("human", question), ("gpt", "Because. " * int(rng.integers(1, 6)))]
        lines.append(json.dumps({
            "id": f"s{i:02d}", "images": [names[(i + j) % len(names)] for j in range(n)],
            "conversations": [{"from": w, "value": v} for w, v in turns]}))
    (root / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    return root


def pipeline(root, preset, pack=None, max_tokens=None, pad=False, rope_preset=None,
             rope=True, batch_size=BATCH, balance=None):
    fields = [{"name": "images", "kind": "image", "max_items": 4},
              {"name": "conversation", "kind": "conversation", "key": "conversations"}]
    chain = [ops.decode(field="images"),
             ops.smart_resize(preset=preset, field="images", min_pixels=4096,
                               max_pixels=16384),
             ops.vision_patchify(preset=preset, field="images"),
             ops.tokenize(tokenizer=str(TOKENIZER), chat_template=TEMPLATE, preset=preset,
                          grid_field="image_grid_thw", pad=pad, max_length=SEQ_LEN)]
    if rope:
        chain.append(ops.vision_rope_index(preset=rope_preset or preset))
    return headrace.Pipeline(
        source={"manifest": root / "manifest.jsonl", "root": root, "fields": fields},
        ops=chain, batch_size=batch_size, seed=3, epochs=1, cpu_threads=2, shuffle=False,
        memory_budget="256MiB", pack=pack, max_tokens=max_tokens, balance=balance)


def samples_of(batch):
    """The unpacked batch's samples by id: input_ids, labels, patches, grids."""
    patches = token_rows.items(batch, "pixel_values", "pixel_values_lengths", "images_count")
    grids = token_rows.split(np.asarray(batch["image_grid_thw"]),
                             np.asarray(batch["images_count"]))
    tokens = token_rows.tokens(batch, ("input_ids", "labels"))
    return {sid: {"input_ids": tokens["input_ids"][i], "labels": tokens["labels"][i],
                  "patches": patches[i], "grids": grids[i]}
            for i, sid in enumerate(batch["id"])}


@pytest.fixture(scope="module")
def models():
    return {}


@pytest.fixture(scope="module")
def cache():
    return {}


def model_of(models, preset):
    if preset not in models:
        models[preset] = tiny_model(preset)
    return models[preset]


def unpacked_of(cache, dataset, preset):
    """Every sample of the preset's chain unpacked, by id."""
    key = ("unpacked", preset)
    if key not in cache:
        out = {}
        with headrace.Loader(pipeline(dataset, preset)) as loader:
            for batch in loader:
                assert not batch.errors, batch.errors
                out.update(samples_of(batch))
        assert len(out) == SAMPLES
        cache[key] = out
    return cache[key]


def references_of(cache, models, dataset, preset):
    """Each sample's logits, loss and loss tokens alone, by id."""
    key = ("alone", preset)
    if key not in cache:
        model = model_of(models, preset)
        cache[key] = {sid: alone(model, s)
                      for sid, s in unpacked_of(cache, dataset, preset).items()}
    return cache[key]


def alone(model, sample, grid_field="image_grid_thw", pixels="pixel_values", extra=None):
    """The sample's logits and loss as transformers runs it alone: the model's own
    positions (get_rope_index from mm_token_type_ids), no mask, no cache."""
    ids = torch.as_tensor(sample["input_ids"], dtype=torch.long)[None]
    mm = torch.zeros_like(ids, dtype=torch.int32)
    mm[ids == model.config.image_token_id] = 1
    mm[ids == model.config.video_token_id] = 2
    kwargs = dict(input_ids=ids, mm_token_type_ids=mm, use_cache=False,
                  labels=torch.as_tensor(sample["labels"], dtype=torch.long)[None])
    if len(sample["grids"]):
        kwargs[pixels] = torch.as_tensor(np.asarray(sample["patches"], dtype=np.float32))
        kwargs[grid_field] = torch.as_tensor(sample["grids"], dtype=torch.long)
    kwargs.update(extra or {})
    with torch.no_grad():
        out = model(**kwargs)
    targets = int((torch.as_tensor(sample["labels"])[1:] != -100).sum())
    return out.logits[0], float(out.loss) if targets else 0.0, targets


def segments(batch, inputs):
    """Each sample's (id, row, first token, tokens) in the model's input layout."""
    if "input_ids_lengths" in batch:
        lengths = np.asarray(batch["input_ids_lengths"]).tolist()
    else:  # text.tokenize pad: true
        lengths = np.asarray(batch["attention_mask"]).sum(axis=1).tolist()
    ids = list(batch["id"])
    if "samples_per_row" in batch:
        out, s = [], 0
        for r, n in enumerate(np.asarray(batch["samples_per_row"]).tolist()):
            at = 0
            for _ in range(n):
                out.append((ids[s], r, at, lengths[s]))
                at += lengths[s]
                s += 1
        return out
    if inputs["input_ids"].shape[0] == 1 and len(ids) > 1:  # one packed row
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).tolist()
        return [(ids[i], 0, starts[i], lengths[i]) for i in range(len(ids))]
    return [(ids[i], i, 0, lengths[i]) for i in range(len(ids))]


def check_batch(model, batch, inputs, reference, tolerance=TOLERANCE):
    """Runs the model on `inputs`; returns the largest difference of a sample's logits
    from its reference, after asserting the loss is the token-weighted mean."""
    with torch.no_grad():
        out = model(**inputs)
    worst = 0.0
    loss_sum = targets = 0
    for sid, row, start, n in segments(batch, inputs):
        want, loss, count = reference[sid]
        got = out.logits[row, start:start + n]
        worst = max(worst, float((got - want).abs().max()))
        loss_sum += loss * count
        targets += count
    if tolerance is not None and "labels" in inputs:
        assert float(out.loss) == pytest.approx(loss_sum / targets, rel=1e-4, abs=1e-4)
    return worst


LAYOUTS = {
    "packed": dict(pack={"seq_len": SEQ_LEN, "window": 0}),
    "packed_window": dict(pack={"seq_len": SEQ_LEN, "window": 8}),
    "max_tokens": dict(max_tokens=700, pack={"window": 4}),
    "unpadded": dict(),
    "padded": dict(pad=True),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("preset", PRESETS)
def test_each_samples_logits_equal_its_forward_alone(dataset, models, cache, preset, layout):
    model = model_of(models, preset)
    reference = references_of(cache, models, dataset, preset)
    to_model = headrace.models.ModelInputs(model)
    seen = set()
    with TorchLoader(pipeline(dataset, preset, **LAYOUTS[layout])) as loader:
        for batch in loader:
            assert not batch.get("errors"), batch
            inputs = to_model(batch)
            assert inputs["use_cache"] is False
            if layout.startswith("packed") or layout == "max_tokens":
                assert inputs["position_ids"].shape[0] == 4 and "attention_mask" not in inputs
            worst = check_batch(model, batch, inputs, reference)
            print(f"{preset} {layout}: largest logit difference from alone {worst:.2e}")
            assert worst <= TOLERANCE, (preset, layout, worst)
            seen.update(batch["id"])
    assert len(seen) == SAMPLES


@pytest.mark.parametrize("preset", PRESETS)
def test_the_inputs_trainers_got_before_give_wrong_logits(dataset, models, cache, preset):
    """What the HF Trainer path handed the model before ModelInputs (the fields forward
    names: position_ids the [rows, L] text positions, the config's use_cache): the
    samples after the first of a row are off by whole units. Shows the test above can
    fail."""
    model = model_of(models, preset)
    reference = references_of(cache, models, dataset, preset)
    worst = 0.0
    with TorchLoader(pipeline(dataset, preset, **LAYOUTS["packed"])) as loader:
        for batch in loader:
            inputs = {k: batch[k] for k in ("input_ids", "labels", "pixel_values",
                                            "image_grid_thw", "position_ids")}
            inputs["input_ids"] = inputs["input_ids"].long()
            inputs["position_ids"] = inputs["position_ids"].long()
            worst = max(worst, check_batch(model, batch, inputs, reference,
                                           tolerance=None))
    print(f"{preset}: the old inputs' largest logit difference from alone {worst:.2f}")
    assert worst > 1.0, worst


def test_a_batch_that_does_not_fit_the_model_fails_at_the_first_batch(dataset, models):
    model = model_of(models, "qwen2_vl")
    with TorchLoader(pipeline(dataset, "qwen2_vl", rope=False)) as loader:
        batch = next(iter(loader))
    with pytest.raises(headrace.ConfigError, match=r"no mrope_position_ids.*vision.rope_index: "
                                                   r"\{preset: qwen2_vl\}"):
        headrace.models.ModelInputs(model)(batch)
    # Qwen3-VL's patches (16 px) into a Qwen2-VL model (14 px).
    with TorchLoader(pipeline(dataset, "qwen3_vl")) as loader:
        batch = next(iter(loader))
    with pytest.raises(headrace.ConfigError, match=r"pixel_values rows hold 1536 values, the "
                                                   r"model's patches 1176"):
        headrace.models.ModelInputs(model)(batch)
    # Another image token id in the model's config.
    other = tiny_model("qwen2_vl")
    other.config.image_token_id = 151654
    with TorchLoader(pipeline(dataset, "qwen2_vl")) as loader:
        batch = next(iter(loader))
    with pytest.raises(headrace.ConfigError, match=r"need \d+ vision tokens at the model's "
                                                   r"spatial_merge_size 2, and its input_ids "
                                                   r"hold 0 of the model's image_token_id 151654"):
        headrace.models.ModelInputs(other)(batch)


def test_the_first_batch_is_checked_once(dataset, models):
    to_model = headrace.models.ModelInputs(model_of(models, "qwen2_vl"))
    with TorchLoader(pipeline(dataset, "qwen2_vl", **LAYOUTS["packed"])) as loader:
        batches = list(loader)
    to_model(batches[0])
    assert to_model.checked
    broken = dict(batches[1])
    broken.pop("mrope_position_ids")
    # Later batches are converted without the first batch's checks (no per-batch sync);
    # their layout still follows the model (text positions in all four rows).
    inputs = to_model(broken)
    assert inputs["position_ids"].shape[0] == 4


class _Grads:
    """A Trainer callback keeping the gradients of the step before the optimizer runs."""

    def __init__(self):
        import transformers

        class Callback(transformers.TrainerCallback):
            def on_pre_optimizer_step(inner, args, state, control, model=None, **kwargs):
                self.grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()
                              if p.grad is not None}

        self.grads = None
        self.callback = Callback()


def hf_step(tmp_path, model, spec):
    """One HeadraceTrainer step on `spec`'s first batch: its gradients and loss."""
    import transformers
    import headrace.hf
    grads = _Grads()
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), use_cpu=True, report_to=[], max_steps=1, learning_rate=1e-3,
        max_grad_norm=0, logging_steps=1, save_strategy="no", disable_tqdm=True)
    trainer = headrace.hf.HeadraceTrainer(model=model, args=args, train_loader=spec,
                                          callbacks=[grads.callback])
    out = trainer.train()
    trainer.headrace_loader.close()
    return grads.grads, out.training_loss


@pytest.mark.parametrize("preset", PRESETS)
def test_a_trainer_step_on_packed_rows_has_the_unpadded_batchs_gradients(
        tmp_path, dataset, models, cache, preset):
    """headrace.hf.HeadraceTrainer, as the README shows it, on one packed batch of every
    sample (window 0: the batch's own samples) and on the same samples unpadded: the same
    loss (the samples' token-weighted mean, as alone) and the same gradients."""
    import copy
    reference = references_of(cache, models, dataset, preset)
    base = model_of(models, preset)
    packed_grads, packed_loss = hf_step(
        tmp_path / "packed", copy.deepcopy(base),
        pipeline(dataset, preset, pack={"seq_len": SEQ_LEN, "window": 0}, batch_size=SAMPLES))
    plain_grads, plain_loss = hf_step(
        tmp_path / "plain", copy.deepcopy(base), pipeline(dataset, preset, batch_size=SAMPLES))
    want = (sum(loss * n for _, loss, n in reference.values())
            / sum(n for _, _, n in reference.values()))
    assert packed_loss == pytest.approx(want, rel=1e-4)
    assert plain_loss == pytest.approx(want, rel=1e-4)
    assert packed_grads.keys() == plain_grads.keys() and len(packed_grads) > 10
    for name, grad in packed_grads.items():
        scale = float(plain_grads[name].abs().max()) + 1e-6
        assert float((grad - plain_grads[name]).abs().max()) <= 1e-4 * max(scale, 1.0), name


def test_the_lightning_module_gets_model_ready_batches(tmp_path, dataset, models, cache):
    """headrace.lightning.HeadraceDataModule with a Qwen2-VL model inside the
    LightningModule: training_step's batch is the model's forward arguments, and each
    packed sample's logits are its logits alone."""
    import lightning.pytorch as pl
    import headrace.lightning
    reference = references_of(cache, models, dataset, "qwen2_vl")
    model = model_of(models, "qwen2_vl")
    outputs = []

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = model

        def training_step(self, batch, batch_idx):
            assert set(batch) <= {"input_ids", "labels", "position_ids", "pixel_values",
                                  "image_grid_thw", "use_cache"}, set(batch)
            assert batch["position_ids"].shape[0] == 4
            out = self.model(**batch)
            outputs.append(out)
            return out.loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    import copy
    spec = pipeline(dataset, "qwen2_vl", pack={"seq_len": SEQ_LEN, "window": 0})
    data = headrace.lightning.HeadraceDataModule(train=spec)
    module = Module()
    module.model = copy.deepcopy(model).train()
    trainer = pl.Trainer(max_steps=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, datamodule=data)
    assert len(outputs) == 1
    with TorchLoader(spec) as loader:
        batch = next(iter(loader))
    inputs = headrace.models.ModelInputs(model)(batch)
    diff = 0.0
    for sid, row, start, n in segments(batch, inputs):
        diff = max(diff, float((outputs[0].logits[row, start:start + n].detach()
                                - reference[sid][0]).abs().max()))
    assert diff <= TOLERANCE, diff


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    """6 conversations over 3 small clips (lossless H.264): one or two videos, or none."""
    if shutil.which("ffmpeg") is None:
        pytest.skip("needs ffmpeg")
    root = tmp_path_factory.mktemp("model_inputs_video")
    rng = np.random.default_rng(5)
    clips = [("a.mp4", 64, 48, 4, 6), ("b.mp4", 96, 64, 8, 12), ("c.mp4", 48, 80, 4, 5)]
    for name, w, h, fps, frames in clips:
        video = rng.integers(0, 256, (frames, h, w, 3), dtype=np.uint8)
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24",
                        "-s", f"{w}x{h}", "-r", str(fps), "-i", "-", "-c:v", "libx264rgb",
                        "-qp", "0", "-pix_fmt", "rgb24", str(root / name)],
                       input=video.tobytes(), check=True)
    lines = []
    for i in range(6):
        names = [clips[(i + j) % 3][0] for j in range([1, 2, 0][i % 3])]
        question = "<video>\n" * len(names) + f"What moves in clip {i}?"
        lines.append(json.dumps({"id": f"v{i}", "videos": names, "conversations": [
            {"from": "human", "value": question}, {"from": "gpt", "value": "Noise. " * (i + 1)},
            {"from": "human", "value": "Sure?"}, {"from": "gpt", "value": "Yes."}]}))
    (root / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    return root


def video_pipeline(root, preset, pack=None):
    tokenize = dict(tokenizer=str(TOKENIZER), chat_template=TEMPLATE, preset=preset,
                    video_grid_field="video_grid_thw", pad=False, max_length=SEQ_LEN)
    if preset == "qwen3_vl":
        tokenize["video_timestamps_field"] = "video_timestamps"
    return headrace.Pipeline(
        source={"manifest": root / "manifest.jsonl", "root": root,
                "fields": [{"name": "videos", "kind": "video", "max_items": 2},
                           {"name": "conversation", "kind": "conversation",
                            "key": "conversations"}]},
        ops=[ops.video_patchify(preset=preset, fps=FPS, max_pixels=4096, field="videos"),
             ops.tokenize(**tokenize),
             ops.vision_rope_index(preset=preset, grid_field="", video_grid_field="video_grid_thw",
                                   seconds_per_grid=2 / FPS)],
        batch_size=3, seed=1, epochs=1, cpu_threads=2, memory_budget="256MiB", shuffle=False,
        pack=pack)


@pytest.mark.parametrize("preset", PRESETS)
def test_packed_video_samples_give_their_logits_alone(videos, models, preset):
    """Videos (one or two a sample, or none) packed, through ModelInputs: each sample's
    logits within 1e-3 of the model alone with its own positions (Qwen2.5-VL's with
    second_per_grid_ts = temporal_patch_size / fps, as its processor passes them)."""
    model = model_of(models, preset)
    reference = {}
    with TorchLoader(video_pipeline(videos, preset)) as loader:
        for batch in loader:
            assert not batch.get("errors"), batch
            patches = token_rows.items(batch, "pixel_values_videos",
                                       "pixel_values_videos_lengths", "videos_count")
            grids = token_rows.split(np.asarray(batch["video_grid_thw"]),
                                     np.asarray(batch["videos_count"]))
            tokens = token_rows.tokens(batch, ("input_ids", "labels"))
            for i, sid in enumerate(batch["id"]):
                sample = {"input_ids": tokens["input_ids"][i], "labels": tokens["labels"][i],
                          "patches": patches[i], "grids": grids[i]}
                extra = {}
                if preset == "qwen2_5_vl" and len(grids[i]):
                    extra["second_per_grid_ts"] = torch.full((len(grids[i]),), 2 / FPS)
                reference[sid] = alone(model, sample, "video_grid_thw", "pixel_values_videos",
                                       extra)
    assert len(reference) == 6
    to_model = headrace.models.ModelInputs(model)
    seen = 0
    with TorchLoader(video_pipeline(videos, preset, {"seq_len": SEQ_LEN, "window": 2})) as loader:
        for batch in loader:
            inputs = to_model(batch)
            assert "pixel_values_videos" in inputs and inputs["position_ids"].shape[0] == 4
            assert check_batch(model, batch, inputs, reference) <= TOLERANCE
            seen += len(batch["id"])
    assert seen == 6


def test_megatron_packed_seq_params_hold_each_sample_as_a_segment(dataset):
    """headrace.megatron.packed_seq_params: Megatron-Core's THD parameters from a packed
    batch, every sample a segment of its own (a row's padding another), max_seqlen the
    longest; an unpacked batch is refused naming what it needs."""
    import headrace.megatron
    from megatron.core.packed_seq_params import PackedSeqParams
    with TorchLoader(pipeline(dataset, "qwen2_vl", pack={"seq_len": SEQ_LEN, "window": 0})) \
            as loader:
        batch = next(iter(loader))
    params = headrace.megatron.packed_seq_params(batch)
    assert isinstance(params, PackedSeqParams) and params.qkv_format == "thd"
    cu = params.cu_seqlens_q.tolist()
    assert params.cu_seqlens_kv.tolist() == cu and cu[-1] == batch["input_ids"].numel()
    inputs = headrace.models.ModelInputs()(batch)
    for _, row, start, n in segments(batch, inputs):
        at = row * SEQ_LEN + start
        assert at in cu and at + n in cu and not any(at < c < at + n for c in cu)
    assert params.max_seqlen_q == max(b - a for a, b in zip(cu, cu[1:]))
    with TorchLoader(pipeline(dataset, "qwen2_vl")) as loader:
        plain = next(iter(loader))
    with pytest.raises(headrace.ConfigError, match="needs a packed batch"):
        headrace.megatron.packed_seq_params(plain)


def test_a_transformers_that_builds_no_packed_mask_is_refused_at_the_first_batch(
        dataset, models, monkeypatch):
    """Where the model's language model does not split 4-row position ids (transformers
    before 5), a packed batch would train wrong: the first batch says so. Stood in for by
    hiding the forward's source; an unpadded batch (masked rows) still passes."""
    import inspect
    model = model_of(models, "qwen2_vl")
    with TorchLoader(pipeline(dataset, "qwen2_vl", pack={"seq_len": SEQ_LEN, "window": 0})) \
            as loader:
        packed = next(iter(loader))
    with TorchLoader(pipeline(dataset, "qwen2_vl")) as loader:
        plain = next(iter(loader))
    real = inspect.getsource
    monkeypatch.setattr(headrace.models.inspect, "getsource",
                        lambda obj: "" if getattr(obj, "__name__", "") == "forward" else real(obj))
    with pytest.raises(headrace.ConfigError, match=r"does not build a packed-sequence mask from "
                                                   r"position ids.*leave batch.pack"):
        headrace.models.ModelInputs(model)(packed)
    headrace.models.ModelInputs(model)(plain)


def test_a_text_model_gets_packed_rows_kept_apart(dataset):
    """Any transformers causal LM, not only Qwen-VL: a packed text batch through
    ModelInputs (restarting [rows, L] positions, no mask, use_cache=False) gives each
    sample its logits alone (a tiny LlamaForCausalLM; the config's use_cache left on)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=151936, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, initializer_range=0.2,
        use_cache=True)).eval()

    def text_pipeline(pack):
        return headrace.Pipeline(
            source={"manifest": dataset / "manifest.jsonl", "root": dataset,
                    "fields": [{"name": "conversation", "kind": "conversation",
                                "key": "conversations"}]},
            ops=[ops.tokenize(tokenizer=str(TOKENIZER), chat_template=TEMPLATE, pad=False,
                              max_length=SEQ_LEN)],
            batch_size=BATCH, seed=3, epochs=1, cpu_threads=2, shuffle=False,
            memory_budget="64MiB", pack=pack)

    reference = {}
    with TorchLoader(text_pipeline(None)) as loader:
        for batch in loader:
            tokens = token_rows.tokens(batch, ("input_ids", "labels"))
            for i, sid in enumerate(batch["id"]):
                ids = torch.as_tensor(tokens["input_ids"][i], dtype=torch.long)[None]
                labels = torch.as_tensor(tokens["labels"][i], dtype=torch.long)[None]
                with torch.no_grad():
                    out = model(input_ids=ids, labels=labels, use_cache=False)
                targets = int((labels[0, 1:] != -100).sum())
                reference[sid] = (out.logits[0], float(out.loss) if targets else 0.0, targets)
    to_model = headrace.models.ModelInputs(model)
    seen = 0
    with TorchLoader(text_pipeline({"seq_len": SEQ_LEN, "window": 4})) as loader:
        for batch in loader:
            inputs = to_model(batch)
            assert inputs["position_ids"].shape == inputs["input_ids"].shape
            assert check_batch(model, batch, inputs, reference) <= TOLERANCE
            seen += len(batch["id"])
    assert seen == SAMPLES


# --- modality-safe steps: batch.balance.every_rank's dummy_kinds (issue 49) -----------

def test_a_ranks_batch_flags_the_kinds_it_lacks(dataset):
    """Two ranks of a balanced run with every_rank image, one sample a batch (1 in 5 is
    text-only): each batch's dummy_kinds flags image exactly when it holds no image, and
    nothing else (video, audio, point clouds were not asked for). One rank alone gets no
    flag: it has no peer to wait for it."""
    safe = {"cost": "tokens", "every_rank": "image"}
    flagged = held = 0
    for rank in range(2):
        spec = pipeline(dataset, "qwen2_vl", batch_size=1, balance=safe)
        with headrace.Loader(spec, rank=rank, world_size=2) as loader:
            for batch in loader:
                flags = np.asarray(batch["dummy_kinds"]).tolist()
                images = int(np.asarray(batch["images_count"]).sum())
                assert flags == [int(images == 0), 0, 0, 0], (rank, batch["id"], images)
                flagged += images == 0
                held += images > 0
    assert flagged > 0 and held > 0
    with headrace.Loader(pipeline(dataset, "qwen2_vl", batch_size=1, balance=safe)) as loader:
        assert all(np.asarray(b["dummy_kinds"]).tolist() == [0, 0, 0, 0] for b in loader)


def _text_only_batch(dataset, preset):
    """The first batch of one sample that holds no image, as a TorchLoader gives it, with
    the image flag a balanced rank would set."""
    with TorchLoader(pipeline(dataset, preset, batch_size=1)) as loader:
        batch = next(b for b in loader if int(b["images_count"].sum()) == 0)
    return {**batch, "dummy_kinds": torch.tensor([1, 0, 0, 0], dtype=torch.uint8)}


@pytest.mark.parametrize("preset", PRESETS)
def test_a_batch_without_images_runs_the_vision_tower_on_a_dummy(dataset, models, preset):
    """headrace.models.vision_dummy_loss: with it every vision tower parameter takes part
    in the step (a gradient, of zeros) and the loss is unchanged; without it they take no
    part (what hangs FSDP/ZeRO-3 when another rank's step runs the tower). A batch with
    images, or no flag, adds nothing."""
    import copy
    model = copy.deepcopy(model_of(models, preset)).train()
    batch = _text_only_batch(dataset, preset)
    inputs = headrace.models.ModelInputs(model)(batch)
    visual = model.model.visual
    plain = model(**inputs).loss
    plain.backward()
    assert all(p.grad is None for p in visual.parameters())
    model.zero_grad(set_to_none=True)
    dummy = headrace.models.vision_dummy_loss(model, batch)
    assert dummy is not None and float(dummy) == 0.0
    loss = model(**inputs).loss + dummy
    assert float(loss) == pytest.approx(float(plain), rel=1e-6)
    loss.backward()
    grads = [p.grad for p in visual.parameters()]
    assert len(grads) > 5 and all(g is not None and not g.abs().any() for g in grads)
    assert headrace.models.vision_dummy_loss(model, {**batch, "dummy_kinds": torch.zeros(4)}) is None
    with TorchLoader(pipeline(dataset, preset, batch_size=1)) as loader:
        with_image = next(b for b in loader if int(b["images_count"].sum()) > 0)
    with_image["dummy_kinds"] = torch.tensor([1, 0, 0, 0], dtype=torch.uint8)
    assert headrace.models.vision_dummy_loss(model, with_image) is None


def test_the_trainers_loss_adds_the_dummy_when_the_batch_flags_it(tmp_path, dataset, models):
    """HeadraceTrainer.compute_loss takes dummy_kinds out of the inputs and adds the
    dummy: the vision tower's parameters get (zero) gradients on a text-only batch."""
    import copy
    import transformers
    import headrace.hf
    model = copy.deepcopy(model_of(models, "qwen2_vl")).train()
    args = transformers.TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[],
                                          max_steps=1, save_strategy="no", disable_tqdm=True)
    trainer = headrace.hf.HeadraceTrainer(model=model, args=args,
                                          train_loader=pipeline(dataset, "qwen2_vl"))
    try:
        batch = _text_only_batch(dataset, "qwen2_vl")
        to_inputs = trainer.get_train_dataloader().to_inputs
        inputs = to_inputs(batch)
        assert "dummy_kinds" in inputs, "the column filter keeps it for compute_loss"
        trainer.compute_loss(model, inputs).backward()
        assert "dummy_kinds" not in inputs
        assert all(p.grad is not None for p in model.model.visual.parameters())
    finally:
        trainer.headrace_loader.close()


def test_forward_with_dummy_runs_the_tower_on_a_flagged_batch(dataset, models):
    """headrace.models.forward_with_dummy: dummy_kinds out of the forward's arguments, the
    dummy added: the loss is the plain forward's, every tower parameter gets a (zero)
    gradient. The Lightning default keeps dummy_kinds beside the forward's arguments."""
    import copy
    import headrace.lightning
    model = copy.deepcopy(model_of(models, "qwen2_vl")).train()
    batch = _text_only_batch(dataset, "qwen2_vl")
    inputs = headrace.lightning._KeepingDummyKinds(headrace.models.ModelInputs(model))(batch)
    assert inputs["dummy_kinds"].tolist() == [1, 0, 0, 0]
    plain = float(model(**{k: v for k, v in inputs.items() if k != "dummy_kinds"}).loss)
    out = headrace.models.forward_with_dummy(model, inputs)
    assert float(out.loss) == pytest.approx(plain, rel=1e-6)
    out.loss.backward()
    grads = [p.grad for p in model.model.visual.parameters()]
    assert len(grads) > 5 and all(g is not None and not g.abs().any() for g in grads)
    assert "dummy_kinds" in inputs, "the caller's batch is left as it was"


def test_a_lightning_step_under_every_rank_gets_dummy_kinds(dataset, models):
    """HeadraceDataModule on a pipeline with batch.balance.every_rank: training_step gets
    the forward's arguments and dummy_kinds (zeros for one rank), and forward_with_dummy
    runs on it."""
    import copy
    import lightning.pytorch as pl
    import headrace.lightning
    losses = []

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = copy.deepcopy(model_of(models, "qwen2_vl")).train()

        def training_step(self, batch, batch_idx):
            assert batch["dummy_kinds"].tolist() == [0, 0, 0, 0]
            out = headrace.models.forward_with_dummy(self.model, batch)
            losses.append(float(out.loss))
            return out.loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    spec = pipeline(dataset, "qwen2_vl", batch_size=2,
                    balance={"cost": "tokens", "every_rank": "image"})
    trainer = pl.Trainer(max_steps=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Module(), datamodule=headrace.lightning.HeadraceDataModule(train=spec))
    assert len(losses) == 2 and all(math.isfinite(v) for v in losses), losses
