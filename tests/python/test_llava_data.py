"""LLaVA's data as it comes, through examples/qwen2_vl.yaml (issue 47).

LLaVA's files (llava_v1_5_mix665k.json) are one JSON array of records whose images are
under "image" (one path) or "images" (a list), or neither (text only, 6% of LLaVA-665k).
Here a generated dataset of that shape, single-image, multi-image and text-only records:
  - the example's chain (its own YAML, only the manifest overridden) over the JSON array:
    no errors, every sample delivered, each sample's images_count its record's, and its
    <|image_pad|> count what transformers' Qwen2-VL image processor makes of its images
    (t*h*w/4 per image at the example's max_pixels), one <|vision_start|> per image;
  - `headrace run examples/qwen2_vl.yaml` on the same array, and on `make-sample --mix
    vlm` data: exit 0, 0 errors;
  - the same records as JSONL give the same batches, kept parsed or as lines.
"""
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import headrace
from conftest import fetch_vocabs

from transformers import Qwen2TokenizerFast  # noqa: E402
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (  # noqa: E402
    Qwen2VLImageProcessorPil)

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "qwen2_vl.yaml"
TOKENIZER = REPO / "data/vocabs/qwen2/tokenizer.json"
MAX_PIXELS = 1003520  # the example's image.smart_resize.max_pixels

fetch_vocabs()


def llava_records(root: Path) -> list:
    """24 records in LLaVA's shapes: "image" a path, "images" a list of 2-3, or neither;
    some images in subfolders, as LLaVA's coco/train2017/... are."""
    rng = np.random.default_rng(4)
    sizes = [(333, 217), (640, 480), (50, 40), (1190, 60), (45, 700), (256, 256)]
    names = []
    for k, (w, h) in enumerate(sizes):
        name = f"coco/train2017/{k:012d}.jpg" if k % 2 else f"gqa/images/{k}.png"
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(root / name)
        names.append(name)
    records = []
    for i in range(24):
        record = {"id": f"{i:06d}"}
        shape = i % 3
        if shape == 0:    # one image, LLaVA's usual "image": "path"
            record["image"] = names[i % len(names)]
            question = "<image>\nWhat is shown here?"
        elif shape == 1:  # several: "images": [...]
            record["images"] = [names[(i + j) % len(names)] for j in range(2 + i % 2)]
            question = "<image>\n" * len(record["images"]) + "Compare these."
        else:             # text only: no image key at all
            question = "Write a haiku about rivers."
        record["conversations"] = [{"from": "human", "value": question},
                                   {"from": "gpt", "value": f"Answer number {i}."}]
        records.append(record)
    return records


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("llava")
    records = llava_records(root)
    # As LLaVA ships it: one array, pretty-printed (elements over several lines).
    (root / "llava_mix.json").write_text(json.dumps(records, indent=2))
    (root / "llava_mix.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return root, {r["id"]: r for r in records}


def example(manifest: Path, **overrides) -> headrace.Pipeline:
    """examples/qwen2_vl.yaml as it is, over `manifest`, unshuffled for comparisons."""
    settings = {"source.manifest": str(manifest), "execution.cpu_threads": 2,
                "memory.budget_bytes": "512MiB", "shuffle": False}
    settings.update(overrides)
    # The example names data/vocabs/... relative to the repository root.
    settings["ops.3.text.tokenize.tokenizer"] = str(TOKENIZER)
    return headrace.Pipeline.from_yaml(EXAMPLE, overrides=settings)


def split(values, lengths):
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return [values[offsets[i]:offsets[i + 1]] for i in range(len(lengths))]


def test_the_example_takes_a_llava_json_array_as_it_comes(dataset):
    root, records = dataset
    tokenizer = Qwen2TokenizerFast(tokenizer_file=str(TOKENIZER))
    image_pad = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    vision_start = tokenizer.convert_tokens_to_ids("<|vision_start|>")
    images = Qwen2VLImageProcessorPil(min_pixels=3136, max_pixels=MAX_PIXELS)
    seen, errors, shapes = [], [], set()
    with headrace.Loader(example(root / "llava_mix.json")) as loader:
        for batch in loader:
            errors += batch.errors
            ids = split(np.asarray(batch["input_ids"]), np.asarray(batch["input_ids_lengths"]))
            counts = np.asarray(batch["images_count"])
            for i, sid in enumerate(batch["id"]):
                record = records[sid]
                paths = record.get("images") or ([record["image"]] if "image" in record else [])
                assert counts[i] == len(paths), sid
                shapes.add(len(paths))
                want_pads = 0
                if paths:
                    grids = images([Image.open(root / p).convert("RGB") for p in paths],
                                   return_tensors="np")["image_grid_thw"]
                    want_pads = int(sum(int(g.prod()) // 4 for g in grids))
                assert int((ids[i] == image_pad).sum()) == want_pads, sid
                assert int((ids[i] == vision_start).sum()) == len(paths), sid
                seen.append(sid)
    assert errors == []
    assert sorted(seen) == sorted(records)  # every sample, once
    assert shapes == {0, 1, 2, 3}


def test_headrace_run_runs_the_example_on_a_llava_json_array(dataset, tmp_path, headrace_bin):
    root, records = dataset
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "vocabs").symlink_to(TOKENIZER.parents[1])
    report = tmp_path / "report.json"
    proc = subprocess.run([str(headrace_bin), "run", str(EXAMPLE), "--quiet", "--report",
                           str(report), "--set", f"source.manifest={root / 'llava_mix.json'}",
                           "--set", "trainer.step_ms=1", "--set", "execution.cpu_threads=2"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(report.read_text())
    assert r["samples"] == len(records) and r["errors"]["total"] == 0, r["errors"]


def batches_of(pipeline):
    out = []
    with headrace.Loader(pipeline) as loader:
        for batch in loader:
            assert batch.errors == []
            # torch: the example's pixel_values are bf16, which numpy has no type for.
            out.append({k: list(v) if isinstance(v, list) else torch.from_dlpack(v).clone()
                        for k, v in batch.items()})
    return out


@pytest.mark.parametrize("records", ["parsed", "lines"])
def test_a_json_array_gives_the_batches_its_records_give_as_jsonl(dataset, records):
    root, _ = dataset
    want = batches_of(example(root / "llava_mix.jsonl", **{"source.records": "parsed"}))
    got = batches_of(example(root / "llava_mix.json", **{"source.records": records}))
    assert len(got) == len(want) == 3
    for g, w in zip(got, want):
        assert g.keys() == w.keys()
        for key in w:
            if isinstance(w[key], list):
                assert g[key] == w[key], key
            else:
                assert g[key].dtype == w[key].dtype and torch.equal(g[key], w[key]), key


def test_the_example_runs_on_make_sample_vlm_data(tmp_path, headrace_bin):
    """`headrace make-sample --mix vlm` (0-4 images a record under "images", text-only
    records, some clips) is data the example runs on as it is: no errors."""
    from e2e_util import run_headrace
    run_headrace(headrace_bin, "make-sample", "--mix", "vlm", "--out",
                 tmp_path / "data" / "sample", "--samples", 64, "--seed", 3)
    (tmp_path / "data" / "vocabs").symlink_to(TOKENIZER.parents[1])
    manifest = [json.loads(line) for line in
                (tmp_path / "data" / "sample" / "manifest.jsonl").read_text().splitlines()]
    assert {len(r["images"]) for r in manifest} == {0, 1, 2, 3, 4}
    report = tmp_path / "report.json"
    proc = subprocess.run([str(headrace_bin), "run", str(EXAMPLE), "--quiet", "--report",
                           str(report), "--set", "trainer.step_ms=1",
                           "--set", "execution.cpu_threads=2"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(report.read_text())
    assert r["samples"] == 64 and r["errors"]["total"] == 0, r["errors"]
