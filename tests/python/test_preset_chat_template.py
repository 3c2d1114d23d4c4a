"""text.tokenize's preset brings its model's chat template (issue 47).

`preset: qwen2_vl` (and qwen2_5_vl: the same text) renders with Qwen2-VL-7B-Instruct's
chat template, `preset: qwen3_vl` with Qwen3-VL-8B-Instruct's, when neither
`chat_template:` nor a tokenizer_config.json gives one; the
template lives in the C++ preset table (ops/vision/preset.h), and the Python builder
reaches it through the op's config like any key. Asserted on Qwen2's real tokenizer.json,
alone in a folder (no tokenizer_config.json beside it):
  - preset only: each sample's input_ids equal transformers' apply_chat_template with
    the model's own template (tests/python/data/chat_templates/), images included;
  - `chat_template:` wins over the preset's, and so does a tokenizer_config.json's;
  - the Qwen3-VL template file is the one Qwen ships (its size and SHA-256);
  - with no preset, no `chat_template:` and no tokenizer_config.json, the op's error
    names what to set.
"""
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import headrace
from conftest import fetch_vocabs

from transformers import Qwen2TokenizerFast  # noqa: E402
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (  # noqa: E402
    Qwen2VLImageProcessorPil)

ops = headrace.ops
REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "tests/python/data/chat_templates"
VOCAB = REPO / "data/vocabs/qwen2/tokenizer.json"
CHATML = (TEMPLATES / "chatml.jinja").read_text()
ROLES = {"human": "user", "gpt": "assistant", "system": "system"}

fetch_vocabs()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Records with 0, 1 and 2 images (a system turn in some), and a tokenizer.json alone
    in its folder."""
    root = tmp_path_factory.mktemp("preset_template")
    rng = np.random.default_rng(7)
    for k, (w, h) in enumerate([(300, 200), (64, 500)]):
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(root / f"{k}.png")
    records = []
    for i in range(9):
        n = i % 3
        turns = [{"from": "human", "value": "<image>\n" * n + f"Question {i}?"},
                 {"from": "gpt", "value": f"Answer {i}."},
                 {"from": "human", "value": "And then?"}, {"from": "gpt", "value": "Done."}]
        if i % 4 == 1:
            turns.insert(0, {"from": "system", "value": "Be brief."})
        records.append({"id": str(i), "images": [f"{k}.png" for k in range(n)],
                        "conversations": turns})
    (root / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (root / "vocab").mkdir()
    shutil.copy(VOCAB, root / "vocab" / "tokenizer.json")
    return root, {r["id"]: r for r in records}


def pipeline(root, tokenizer, **tokenize):
    fields = [{"name": "images", "kind": "image", "max_items": 2},
              {"name": "conversation", "kind": "conversation", "key": "conversations"}]
    return headrace.Pipeline(
        source={"manifest": root / "manifest.jsonl", "fields": fields},
        ops=[ops.decode(field="images"),
             ops.smart_resize(preset="qwen2_vl", field="images", max_pixels=200000),
             ops.vision_patchify(preset="qwen2_vl", field="images"),
             ops.tokenize(tokenizer=str(tokenizer), grid_field="image_grid_thw", pad=False,
                          max_length=2048, **tokenize)],
        batch_size=3, seed=1, cpu_threads=1, memory_budget="256MiB", shuffle=False)


def input_ids_of(p):
    out = {}
    with headrace.Loader(p) as loader:
        for batch in loader:
            assert batch.errors == []
            lengths = np.asarray(batch["input_ids_lengths"])
            ids = np.split(np.asarray(batch["input_ids"]), np.cumsum(lengths)[:-1])
            out.update({sid: ids[i].tolist() for i, sid in enumerate(batch["id"])})
    return out


def reference_ids(root, record, template):
    """transformers: apply_chat_template with `template` on the record's messages (images
    as content items), each image's <|image_pad|> repeated to its grid's count, as
    Qwen2VLProcessor does, then the tokenizer."""
    tokenizer = Qwen2TokenizerFast(tokenizer_file=str(VOCAB))
    messages = []
    for turn in record["conversations"]:
        text = turn["value"]
        if "<image>" in text:
            parts = text.split("<image>")
            content = []
            for j, part in enumerate(parts):
                if j > 0:
                    content.append({"type": "image"})
                if part:
                    content.append({"type": "text", "text": part})
            messages.append({"role": ROLES[turn["from"]], "content": content})
        else:
            messages.append({"role": ROLES[turn["from"]], "content": text})
    rendered = tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False)
    if record["images"]:
        images = Qwen2VLImageProcessorPil(min_pixels=3136, max_pixels=200000)(
            [Image.open(root / p).convert("RGB") for p in record["images"]], return_tensors="np")
        pieces = rendered.split("<|image_pad|>")
        assert len(pieces) == len(record["images"]) + 1
        rendered = pieces[0] + "".join("<|image_pad|>" * (int(g.prod()) // 4) + rest
                                       for g, rest in zip(images["image_grid_thw"], pieces[1:]))
    return tokenizer(rendered)["input_ids"]


def test_the_qwen3_vl_template_is_the_one_qwen_ships():
    # Qwen/Qwen3-VL-8B-Instruct-GGUF's tokenizer.chat_template: 5292 bytes.
    data = (TEMPLATES / "Qwen3-VL-8B-Instruct.jinja").read_bytes()
    assert len(data) == 5292
    assert hashlib.sha256(data).hexdigest() == (
        "3636d0f0bd6bef02654cdffdc447b79cb2cef8ab02cc75267345946291a489e4")


@pytest.mark.parametrize("preset,model", [("qwen2_vl", "Qwen2-VL-7B-Instruct"),
                                          ("qwen2_5_vl", "Qwen2.5-VL-7B-Instruct"),
                                          ("qwen3_vl", "Qwen3-VL-8B-Instruct")])
def test_a_preset_alone_renders_with_its_models_chat_template(dataset, preset, model):
    root, records = dataset
    template = (TEMPLATES / f"{model}.jinja").read_text()
    # The chain's images are cut by qwen2_vl's patchify: the tokenizer's sizes follow it.
    sizes = {"patch_size": 14} if preset == "qwen3_vl" else {}
    got = input_ids_of(pipeline(root, root / "vocab" / "tokenizer.json", preset=preset,
                                **sizes))
    assert sorted(got) == sorted(records)
    for sid, record in records.items():
        assert got[sid] == reference_ids(root, record, template), sid


def test_chat_template_and_a_tokenizer_config_win_over_the_presets(dataset, tmp_path):
    root, records = dataset
    text_only = {sid: r for sid, r in records.items() if not r["images"]}
    # chat_template: given inline.
    inline = input_ids_of(pipeline(root, root / "vocab" / "tokenizer.json", preset="qwen2_vl",
                                   chat_template=CHATML))
    # A tokenizer_config.json beside the tokenizer, with its own template.
    (tmp_path / "tokenizer.json").symlink_to(VOCAB)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": CHATML, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}))
    config = input_ids_of(pipeline(root, tmp_path / "tokenizer.json", preset="qwen2_vl"))
    for sid, record in text_only.items():
        want = reference_ids(root, record, CHATML)
        assert inline[sid] == want, sid
        assert config[sid] == want, sid
        # Not what the preset's template renders (its default system turn, for one).
        assert want != reference_ids(root, record, (TEMPLATES / "Qwen2-VL-7B-Instruct.jinja")
                                     .read_text())


def test_no_template_anywhere_names_what_to_set(dataset, tmp_path):
    root, _ = dataset

    def run(tokenizer):
        tokens = {"image_token": "<|image_pad|>", "image_start": "<|vision_start|>",
                  "image_end": "<|vision_end|>"}
        with headrace.Loader(pipeline(root, tokenizer, **tokens)) as loader:
            next(iter(loader))

    # No preset, no chat_template, no tokenizer_config.json beside the tokenizer.
    with pytest.raises(headrace.ConfigError, match=r"no such file: .*tokenizer_config.json"):
        run(root / "vocab" / "tokenizer.json")
    # A tokenizer_config.json without a template.
    (tmp_path / "tokenizer.json").symlink_to(VOCAB)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    with pytest.raises(headrace.ConfigError,
                       match=r"text.tokenize.chat_template: none given and the tokenizer config "
                             r"has none \(set chat_template"):
        run(tmp_path / "tokenizer.json")
