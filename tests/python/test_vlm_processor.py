"""A Qwen2-VL SFT pipeline against transformers' Qwen2-VL processor (issue 27).

Headrace: a list of images (`max_items`) -> image.decode -> image.smart_resize ->
vision.patchify (preset qwen2_vl), and text.tokenize with a qwen2 tokenizer.json, the
Qwen2-VL chat template, pad: false and grid_field image_grid_thw, through
`headrace.Loader`. The reference, built from local pieces only (no network):
Qwen2VLProcessor(Qwen2VLImageProcessorPil, Qwen2TokenizerFast(data/vocabs/qwen2/
tokenizer.json), the Qwen2-VL-7B-Instruct chat template), its apply_chat_template on the
same conversation with image content items, then processor(text=..., images=...).

Asserted per sample, on generated conversations with 0, 1 and 3 images of odd sizes,
extreme aspect ratios, grayscale, JPEG and EXIF-rotated JPEG:
  - image_grid_thw identical, input_ids identical;
  - pixel_values max and mean absolute difference printed and asserted 0 (the kernels
    are byte-identical: test_vlm_reference.py);
  - labels are the ids exactly on the assistant turns (content and <|im_end|>\\n);
  - a sample with 2 placeholders and 1 image is one error naming both counts, and the
    run goes on.
The same for a single image field (the one-image records) and for a padded list.
"""
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import headrace
from conftest import fetch_vocabs

import transformers  # noqa: F401  (not importorskip: scripts/setup.sh installs it)
from transformers import Qwen2TokenizerFast, Qwen2VLProcessor  # noqa: E402
from transformers.image_utils import load_image  # noqa: E402
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (  # noqa: E402
    Qwen2VLImageProcessorPil)

ops = headrace.ops
REPO = Path(__file__).resolve().parents[2]
TOKENIZER = REPO / "data/vocabs/qwen2/tokenizer.json"
TEMPLATE = (REPO / "tests/python/data/chat_templates/Qwen2-VL-7B-Instruct.jinja").read_text()
IGNORE = -100
MAX_ITEMS = 4
BAD = 10  # the manifest line of the mismatched sample

fetch_vocabs()  # TOKENIZER, when a fresh clone has no data/vocabs yet


class _LocalProcessor(Qwen2VLProcessor):
    """ProcessorMixin checks its parts' classes through the auto mappings, whose video
    entry needs torchvision (not installed); the parts here are the right classes."""

    def check_argument_for_proper_class(self, argument_name, argument):
        return type(argument)


# Qwen/Qwen2-VL-7B-Instruct's preprocessor_config.json (= the qwen2_vl preset).
MIN_PIXELS, MAX_PIXELS = 3136, 12845056


def make_processor(max_pixels=MAX_PIXELS, image_processor_class=Qwen2VLImageProcessorPil):
    """The reference processor (also bench/vlm_processor.py's): `max_pixels` as
    image.smart_resize's; another image processor class (the torchvision one) in place
    of the PIL one."""
    tokenizer = Qwen2TokenizerFast(tokenizer_file=str(TOKENIZER), eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>")
    images = image_processor_class(min_pixels=MIN_PIXELS, max_pixels=max_pixels)
    return _LocalProcessor(image_processor=images, tokenizer=tokenizer, chat_template=TEMPLATE)


@pytest.fixture(scope="module")
def processor():
    return make_processor()


def photo(width, height, seed, channels=3):
    rng = np.random.default_rng(seed)
    x = np.linspace(0, 1, width)[None, :, None]
    y = np.linspace(0, 1, height)[:, None, None]
    c = np.arange(channels)[None, None, :]
    base = 127 + 90 * np.sin(6 * x + 4 * y + c) + 30 * np.cos(40 * x * y + c)
    pixels = np.clip(base + rng.normal(0, 18, (height, width, channels)), 0, 255)
    return pixels.astype(np.uint8)


def write_images(folder: Path) -> list:
    folder.mkdir(parents=True, exist_ok=True)
    names = []

    def save(name, image, **kw):
        image.save(folder / name, **kw)
        names.append(name)

    save("odd.png", Image.fromarray(photo(333, 217, 1)))
    save("small.png", Image.fromarray(photo(50, 40, 2)))             # below min_pixels
    save("wide.png", Image.fromarray(photo(1190, 60, 3)))            # aspect ~20
    save("tall.png", Image.fromarray(photo(45, 700, 4)))
    save("gray.png", Image.fromarray(photo(301, 199, 5, 1)[..., 0], "L"))
    save("photo.jpg", Image.fromarray(photo(640, 480, 6)), quality=90)
    exif = Image.Exif()
    exif[0x0112] = 6  # displayed rotated 90 degrees clockwise
    save("rotated.jpg", Image.fromarray(photo(400, 300, 7)), quality=92, exif=exif.tobytes())
    save("exact.png", Image.fromarray(photo(28 * 9, 28 * 4, 8)))
    return names


# Conversations: (images, turns), turns as the manifest's (from, value) with <image>.
def conversations(names):
    q = ["What is in this picture?", "Describe it in one line.", "Which one is brighter?",
         "How many colours do you see?"]
    a = ["A gradient with some noise.", "Smooth waves of colour.", "The second, slightly.",
         "Three, mostly: red, green and blue."]
    out = []
    for i in range(24):
        k = [0, 1, 3][i % 3]
        images = [names[(i + j) % len(names)] for j in range(k)]
        if k == 0:
            turns = [("human", q[i % 4]), ("gpt", a[i % 4])]
        elif k == 1:
            turns = [("human", "<image>\n" + q[i % 4]), ("gpt", a[i % 4]),
                     ("human", "And the edges?"), ("gpt", "They are sharp.")]
        else:  # three images, spread over two user turns, one mid-text
            turns = [("human", "<image>\n<image>\nCompare these two."), ("gpt", a[i % 4]),
                     ("human", "Now this one: <image> is it the same?"), ("gpt", "No.")]
        if i % 4 == 1:
            turns.insert(0, ("system", "You are a careful assistant."))
        out.append((images, turns))
    return out


ROLES = {"human": "user", "gpt": "assistant", "system": "system"}


def messages_of(turns):
    """The processor's messages: a turn with images as content items, in order."""
    out = []
    for who, text in turns:
        if "<image>" not in text:
            out.append({"role": ROLES[who], "content": text})
            continue
        content = []
        for i, part in enumerate(text.split("<image>")):
            if i > 0:
                content.append({"type": "image"})
            if part:
                content.append({"type": "text", "text": part})
        out.append({"role": ROLES[who], "content": content})
    return out


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("vlm_sft")
    names = write_images(root / "images")
    records = {}
    lines = []
    for i, (images, turns) in enumerate(conversations(names)):
        record = {"id": f"s{i:02d}", "images": [f"images/{n}" for n in images],
                  "conversations": [{"from": w, "value": v} for w, v in turns]}
        if len(images) == 1:
            record["image"] = record["images"][0]
        records[record["id"]] = record
        lines.append(json.dumps(record))
    # The mismatch, at index BAD: two placeholders, one image.
    bad = {"id": "bad", "images": ["images/odd.png"], "image": "images/odd.png",
           "conversations": [{"from": "human", "value": "<image><image>Both?"},
                             {"from": "gpt", "value": "Yes."}]}
    lines.insert(BAD, json.dumps(bad))
    (root / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    return root, records


def pipeline(root: Path, mode: str, manifest=None, max_pixels=None, max_length=8192, **kw):
    """The Headrace chain over `root` (its manifest.jsonl, or `manifest` with paths
    relative to `root`); `max_pixels` as the reference processor's (None: the preset's);
    `kw` overrides headrace.Pipeline's arguments (bench/vlm_processor.py's)."""
    if mode == "single":  # the records with one image (others lack `image`: skipped)
        fields = [{"name": "image", "kind": "image", "required": True}]
        field = "image"
    else:
        fields = [{"name": "images", "kind": "image", "max_items": MAX_ITEMS,
                   "pad_items": mode == "padded"}]
        field = "images"
    fields.append({"name": "conversation", "kind": "conversation", "key": "conversations"})
    resize = {} if max_pixels is None else {"max_pixels": max_pixels}
    args = dict(batch_size=4, seed=1, cpu_threads=2, memory_budget="256MiB", shuffle=False,
                overrides={"errors.max_error_rate": 0.9})
    args.update(kw)
    return headrace.Pipeline(
        source={"manifest": manifest or root / "manifest.jsonl", "root": root, "fields": fields},
        ops=[ops.decode(field=field),
             ops.smart_resize(preset="qwen2_vl", field=field, **resize),
             ops.vision_patchify(preset="qwen2_vl", field=field),
             ops.tokenize(tokenizer=str(TOKENIZER), chat_template=TEMPLATE, preset="qwen2_vl",
                          grid_field="image_grid_thw", pad=False, max_length=max_length)],
        **args)


def split(values, lengths):
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return [values[offsets[i]:offsets[i + 1]] for i in range(len(lengths))]


def samples_of(batch, mode):
    """Per row: (id, grids [n, 3], pixel_values [patches, 1176], input_ids, labels)."""
    n = len(batch["id"])
    ids = split(np.asarray(batch["input_ids"]), np.asarray(batch["input_ids_lengths"]))
    labels = split(np.asarray(batch["labels"]), np.asarray(batch["labels_lengths"]))
    positions = split(np.asarray(batch["position_ids"]), np.asarray(batch["position_ids_lengths"]))
    grid = np.asarray(batch["image_grid_thw"])
    pixels = np.asarray(batch["pixel_values"])
    patch_lengths = np.asarray(batch["pixel_values_lengths"])
    if mode == "single":
        count = np.ones(n, np.int64)
        grids = [grid[i:i + 1] for i in range(n)]
    else:
        count = np.asarray(batch["images_count"])
        if mode == "padded":
            assert grid.shape == (n, MAX_ITEMS, 3)
            assert not grid[np.arange(MAX_ITEMS)[None, :] >= count[:, None]].any()
            grids = [grid[i, :count[i]] for i in range(n)]
        else:
            assert grid.shape == (int(count.sum()), 3)
            grids = split(grid, count)
    assert len(patch_lengths) == int(count.sum())  # one entry per image
    per_image = split(pixels, patch_lengths)
    per_sample = split(np.arange(len(per_image)), count)
    out = []
    for i in range(n):
        assert np.array_equal(positions[i], np.arange(len(ids[i])))
        pv = (np.concatenate([per_image[k] for k in per_sample[i]]) if len(per_sample[i])
              else np.zeros((0, pixels.shape[1]), pixels.dtype))
        out.append((batch["id"][i], grids[i], pv, ids[i], labels[i]))
    return out


def reference(processor, root, record):
    messages = messages_of([(t["from"], t["value"]) for t in record["conversations"]])
    text = processor.apply_chat_template(messages, tokenize=False)
    images = [load_image(str(root / p)) for p in record["images"]] or None
    return processor(text=[text], images=images, return_tensors="np"), messages


@pytest.mark.parametrize("mode", ["list", "padded", "single"])
def test_the_pipeline_equals_the_qwen2_vl_processor(processor, dataset, mode):
    root, records = dataset
    tokenizer = processor.tokenizer
    pad_id = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    seen, errors, diffs, images_seen = set(), [], [], 0
    with headrace.Loader(pipeline(root, mode)) as loader:
        for batch in loader:
            errors += batch.errors
            for sid, grids, pv, ids, labels in samples_of(batch, mode):
                record = records[sid]
                want, messages = reference(processor, root, record)
                k = len(record["images"])
                assert len(grids) == k
                images_seen += k
                if k:
                    assert grids.tolist() == want["image_grid_thw"].tolist(), sid
                    assert pv.shape == want["pixel_values"].shape, sid
                    diff = np.abs(pv.astype(np.float64) - want["pixel_values"].astype(np.float64))
                    diffs.append((diff.max(), diff.mean(), diff.size))
                assert ids.tolist() == want["input_ids"][0].tolist(), sid
                assert int((ids == pad_id).sum()) == int(
                    sum(g.prod() // 4 for g in want["image_grid_thw"])) if k else True
                # Labels: the ids exactly where an assistant turn is (its content and the
                # <|im_end|>\n the template closes it with); nothing else, no image token.
                trained = labels != IGNORE
                assert np.array_equal(labels[trained], ids[trained])
                assert not (ids[trained] == pad_id).any()
                want_text = "".join(m["content"] + "<|im_end|>\n" for m in messages
                                    if m["role"] == "assistant")
                assert tokenizer.decode(ids[trained].tolist()) == want_text, sid
                seen.add(sid)
    expected = {sid for sid, r in records.items()
                if mode != "single" or len(r["images"]) == 1}
    assert seen == expected
    assert images_seen >= (8 if mode == "single" else 30)
    worst = max(d[0] for d in diffs)
    mean = sum(d[1] * d[2] for d in diffs) / sum(d[2] for d in diffs)
    print(f"{mode}: {len(seen)} samples, {images_seen} images: pixel_values max abs diff "
          f"{worst:.3g}, mean abs diff {mean:.3g}")
    assert worst == 0
    # The mismatch is the one error (single mode: the records without `image` too),
    # naming both counts; every other sample came through.
    mismatch = [e for e in errors if "image placeholders" in e]
    assert len(mismatch) == 1, errors
    assert f"index {BAD}," in mismatch[0], mismatch[0]
    assert "2 image placeholders ('<image>') and the sample 1 image (image_grid_thw)" in \
        mismatch[0], mismatch[0]
    # Single mode: the records without one image lack `image` too (a batch whose samples
    # all fail comes empty, its errors in the report only).
    others = [e for e in errors if e not in mismatch]
    assert all("missing field 'image'" in e for e in others) and (mode == "single") == bool(
        others), others


def test_a_tokenize_naming_a_grid_nobody_writes_is_a_config_error(dataset):
    root, _ = dataset
    with pytest.raises(headrace.ConfigError, match="reads the batch field 'image_grid_thw', "
                                                   "which no op before it writes"):
        headrace.Pipeline(
            source={"manifest": root / "manifest.jsonl", "root": root,
                    "fields": [{"name": "conversation", "kind": "conversation",
                                "key": "conversations"}]},
            ops=[ops.tokenize(tokenizer=str(TOKENIZER), chat_template=TEMPLATE,
                              preset="qwen2_vl", grid_field="image_grid_thw", pad=False,
                              max_length=512)],
            batch_size=4, seed=1, cpu_threads=1, memory_budget="64MiB")


def test_the_example_runs_over_make_sample_data(tmp_path, headrace_bin):
    """examples/qwen2_vl.yaml as `headrace run` runs it, from a folder holding
    data/sample (make-sample) and data/vocabs: every sample delivered, none failed."""
    from e2e_util import run_headrace
    run_headrace(headrace_bin, "make-sample", "--out", tmp_path / "data" / "sample",
                 "--samples", 16, "--seed", 3)
    (tmp_path / "data" / "vocabs").symlink_to(TOKENIZER.parents[1])
    report = tmp_path / "report.json"
    proc = subprocess.run([str(headrace_bin), "run", str(REPO / "examples" / "qwen2_vl.yaml"),
                           "--quiet", "--report", str(report), "--set", "trainer.step_ms=1",
                           "--set", "execution.cpu_threads=2"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(report.read_text())
    assert r["samples"] == 16 and r["errors"]["total"] == 0, r["errors"]
