"""vision.rope_index against transformers' get_rope_index (issue 27).

Real pipelines through `headrace.Loader`: generated images of different sizes in a media
list (0 to 3 per sample, text-only samples among them) -> image.decode ->
image.smart_resize -> vision.patchify -> text.tokenize (Qwen2's real tokenizer.json,
the Qwen2-VL chat template, grid_field) -> vision.rope_index, for each preset
(qwen2_vl, qwen2_5_vl, qwen3_vl). The reference is the model class of that preset,
instantiated on CPU from a tiny config (no weights), its get_rope_index called on the
same input_ids and grids:
  - per sample, alone (as a packed row needs them): position ids and delta equal;
  - per batch, the samples padded to one length with an attention mask: the model's
    [3, batch, seq] equals the batch's rows padded and permuted (the README's recipe);
  - with text.tokenize pad: true, the fixed [max_length, 3] rows permuted equal the
    model's on the padded batch with its attention_mask.
Exactly equal, every sample.
"""
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import headrace
from conftest import fetch_vocabs

from transformers import Qwen2VLConfig, Qwen2_5_VLConfig, Qwen3VLConfig  # noqa: E402
from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel  # noqa: E402
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel  # noqa: E402
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel  # noqa: E402

ops = headrace.ops
REPO = Path(__file__).resolve().parents[2]
TOKENIZER = REPO / "data/vocabs/qwen2/tokenizer.json"
TEMPLATE = (REPO / "tests/python/data/chat_templates/Qwen2-VL-7B-Instruct.jinja").read_text()
MAX_ITEMS = 4
PRESETS = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]

fetch_vocabs()


def tiny_model(preset):
    """The preset's model class with a tiny config: its get_rope_index reads only the
    config's merge size, token ids and (2.5) tokens_per_second, which are the real ones."""
    text = dict(vocab_size=151936, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                num_attention_heads=2, num_key_value_heads=1)
    if preset == "qwen2_vl":
        config = Qwen2VLConfig(
            text_config={**text, "rope_scaling": {"type": "mrope", "mrope_section": [2, 1, 1]}},
            vision_config=dict(depth=1, embed_dim=16, num_heads=2, hidden_size=16, mlp_ratio=1))
        model = Qwen2VLModel(config)
    elif preset == "qwen2_5_vl":
        config = Qwen2_5_VLConfig(
            text_config={**text, "rope_scaling": {"type": "mrope", "mrope_section": [2, 1, 1]}},
            vision_config=dict(depth=1, hidden_size=16, num_heads=2, intermediate_size=16,
                               out_hidden_size=16, tokens_per_second=2))
        model = Qwen2_5_VLModel(config)
    else:
        config = Qwen3VLConfig(
            text_config={**text, "head_dim": 8, "rope_scaling": {
                "rope_type": "default", "mrope_section": [2, 1, 1], "mrope_interleaved": True}},
            vision_config=dict(depth=1, hidden_size=16, num_heads=2, intermediate_size=16,
                               out_hidden_size=16, deepstack_visual_indexes=[0]))
        model = Qwen3VLModel(config)
    assert model.config.vision_config.spatial_merge_size == 2
    assert (model.config.image_token_id, model.config.video_token_id) == (151655, 151656)
    return model.eval()


def photo(width, height, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (height, width, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """24 samples: 0, 1, 2 or 3 images each of sizes from 56x56 to 420x100 (grids with
    h != w both ways), the text-only ones with one or two turns."""
    root = tmp_path_factory.mktemp("mrope")
    (root / "images").mkdir()
    sizes = [(333, 217), (56, 56), (420, 100), (90, 300), (200, 200), (150, 77)]
    names = []
    for k, (w, h) in enumerate(sizes):
        name = f"images/p{k}.png"
        Image.fromarray(photo(w, h, k)).save(root / name)
        names.append(name)
    lines = []
    for i in range(24):
        n = [0, 1, 2, 3][i % 4]
        images = [names[(i + j) % len(names)] for j in range(n)]
        if n == 0:
            turns = [("human", f"Tell me a fact number {i}."), ("gpt", "Water is wet.")]
            if i % 8 == 0:
                turns += [("human", "Another?"), ("gpt", "Fire is hot.")]
        else:
            turns = [("human", "<image>\n" * (n - 1) + f"Compare these, case {i}."),
                     ("gpt", "The first is brighter."),
                     ("human", "And this one: <image> the same?"), ("gpt", "No.")]
        lines.append(json.dumps({"id": f"s{i:02d}", "images": images,
                                 "conversations": [{"from": w, "value": v} for w, v in turns]}))
    (root / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    return root


def pipeline(root, preset, pad=False, padded_items=False, rope=None):
    fields = [{"name": "images", "kind": "image", "max_items": MAX_ITEMS,
               "pad_items": padded_items},
              {"name": "conversation", "kind": "conversation", "key": "conversations"}]
    return headrace.Pipeline(
        source={"manifest": root / "manifest.jsonl", "root": root, "fields": fields},
        ops=[ops.decode(field="images"),
             ops.smart_resize(preset=preset, field="images", max_pixels=200704),
             ops.vision_patchify(preset=preset, field="images"),
             ops.tokenize(tokenizer=str(TOKENIZER), chat_template=TEMPLATE, preset=preset,
                          grid_field="image_grid_thw", pad=pad, max_length=2048),
             rope if rope is not None else ops.vision_rope_index(preset=preset)],
        batch_size=5, seed=1, cpu_threads=2, memory_budget="256MiB", shuffle=False)


def split(values, lengths):
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return [values[offsets[i]:offsets[i + 1]] for i in range(len(lengths))]


def grids_of(batch, padded_items):
    count = np.asarray(batch["images_count"])
    grid = np.asarray(batch["image_grid_thw"])
    if padded_items:
        return [grid[i, :count[i]] for i in range(len(count))]
    return split(grid, count)


def reference(model, ids, grids, mask=None):
    """get_rope_index on [batch, seq] ids (mm_token_type_ids as the processor makes them)."""
    ids = torch.as_tensor(np.asarray(ids), dtype=torch.int64)
    mm = torch.zeros_like(ids, dtype=torch.int32)
    mm[ids == model.config.image_token_id] = 1
    mm[ids == model.config.video_token_id] = 2
    thw = torch.as_tensor(np.concatenate(grids)) if sum(len(g) for g in grids) else None
    with torch.no_grad():
        pos, deltas = model.get_rope_index(
            ids, mm, image_grid_thw=thw,
            attention_mask=None if mask is None else torch.as_tensor(np.asarray(mask)))
    return pos.numpy(), deltas.numpy()


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("padded_items", [False, True], ids=["items", "padded_items"])
def test_each_sample_equals_get_rope_index_alone_and_the_batch_permuted(dataset, preset,
                                                                        padded_items):
    model = tiny_model(preset)
    seen, images, shapes = 0, 0, set()
    with headrace.Loader(pipeline(dataset, preset, padded_items=padded_items)) as loader:
        for batch in loader:
            assert not batch.errors, batch.errors
            ids = split(np.asarray(batch["input_ids"]), np.asarray(batch["input_ids_lengths"]))
            pos = np.asarray(batch["mrope_position_ids"])
            assert pos.dtype == np.int64 and pos.ndim == 2 and pos.shape[1] == 3
            lengths = np.asarray(batch["mrope_position_ids_lengths"])
            assert lengths.tolist() == [len(x) for x in ids]  # one entry per sample
            per_sample = split(pos, lengths)
            deltas = np.asarray(batch["rope_deltas"])
            assert deltas.shape == (len(ids), 1)
            grids = grids_of(batch, padded_items)
            for i in range(len(ids)):
                want, want_delta = reference(model, ids[i][None], [grids[i]])
                assert np.array_equal(per_sample[i], want[:, 0].T), (preset, batch["id"][i])
                assert deltas[i, 0] == want_delta[0, 0], (preset, batch["id"][i])
                if len(grids[i]) == 0:  # text only: arange in all three, delta 0
                    assert np.array_equal(per_sample[i], np.repeat(
                        np.arange(len(ids[i]))[:, None], 3, axis=1))
                    assert deltas[i, 0] == 0
                images += len(grids[i])
                shapes |= {tuple(g) for g in grids[i].tolist()}
                seen += 1
            # The whole batch at once, right-padded: [3, B, L] is the rows padded to
            # [B, L, 3], permuted.
            length = max(len(x) for x in ids)
            padded = np.zeros((len(ids), length), np.int64)
            mask = np.zeros_like(padded)
            ours = np.zeros((len(ids), length, 3), np.int64)
            for i, x in enumerate(ids):
                padded[i, :len(x)], mask[i, :len(x)], ours[i, :len(x)] = x, 1, per_sample[i]
            want, want_deltas = reference(model, padded, grids, mask)
            assert np.array_equal(torch.as_tensor(ours).permute(2, 0, 1).numpy(), want)
            assert np.array_equal(deltas, want_deltas)
    assert seen == 24 and images == 36
    assert len(shapes) >= 5 and any(h != w for _, h, w in shapes), shapes


@pytest.mark.parametrize("preset", ["qwen2_vl", "qwen3_vl"])
def test_padded_tokens_give_fixed_rows_equal_to_get_rope_index_with_the_mask(dataset, preset):
    model = tiny_model(preset)
    seen = 0
    with headrace.Loader(pipeline(dataset, preset, pad=True)) as loader:
        for batch in loader:
            assert not batch.errors, batch.errors
            ids, mask = np.asarray(batch["input_ids"]), np.asarray(batch["attention_mask"])
            pos = np.asarray(batch["mrope_position_ids"])
            assert pos.shape == (len(ids), 2048, 3)
            want, want_deltas = reference(model, ids, grids_of(batch, False), mask)
            assert np.array_equal(torch.as_tensor(pos).permute(2, 0, 1).numpy(), want)
            assert np.array_equal(np.asarray(batch["rope_deltas"]), want_deltas)
            seen += len(ids)
    assert seen == 24


def test_i32_ids_are_the_same_numbers(dataset):
    rope = ops.vision_rope_index(preset="qwen2_vl", dtype="i32", output="pos32")
    with headrace.Loader(pipeline(dataset, "qwen2_vl", rope=rope)) as loader:
        batch = next(iter(loader))
        ids = split(np.asarray(batch["input_ids"]), np.asarray(batch["input_ids_lengths"]))
        pos = np.asarray(batch["pos32"])
        assert pos.dtype == np.int32
        want, _ = reference(tiny_model("qwen2_vl"), ids[1][None], [grids_of(batch, False)[1]])
        assert np.array_equal(split(pos, np.asarray(batch["pos32_lengths"]))[1], want[:, 0].T)


def test_a_missing_grid_field_or_another_merge_size_is_a_config_error(dataset):
    with pytest.raises(headrace.ConfigError,
                       match=r"ops\[4\]\.vision\.rope_index: reads the batch field 'grids', "
                             r"which no op before it writes"):
        pipeline(dataset, "qwen2_vl", rope=ops.vision_rope_index(grid_field="grids"))
    with pytest.raises(headrace.ConfigError,
                       match=r"ops\[4\]\.vision\.rope_index\.merge_size 4 disagrees with "
                             r"ops\[2\]\.vision\.patchify\.merge_size 2 \(preset qwen2_vl\)"):
        pipeline(dataset, "qwen2_vl", rope=ops.vision_rope_index(merge_size=4))
