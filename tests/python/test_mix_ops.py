"""A blend whose entries have ops of their own (source.mix[i].ops, issue 28): an image
dataset and a video dataset feeding one Qwen2-VL batch layout.

- "pictures": conversations with 0 to 3 images each (a media list), through image.decode,
  image.smart_resize and vision.patchify; "clips": one short H.264 clip each (a list of
  at most one), through video.patchify. Shared by both: text.tokenize (Qwen2's
  tokenizer.json, the Qwen2-VL chat template, unpadded, expanding <image> and <video>
  from either grid field) and vision.rope_index.
- Every sample of both entries comes exactly once per epoch (until: epochized), and each
  equals the same sample through its entry's pipeline alone: input_ids, labels, position
  ids, M-RoPE ids, patches and grids, byte for byte. A pictures sample has no video rows
  (video_count 0) and a clips sample no image rows (images_count 0), so one batch holds
  both kinds.
- Packed (batch.pack), each segment is the same sample unpacked; a state dict resumes the
  blend byte-identically; the report names each entry's ops.
"""
import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import headrace
import token_rows
from conftest import fetch_vocabs

ops = headrace.ops
REPO = Path(__file__).resolve().parents[2]
TOKENIZER = REPO / "data/vocabs/qwen2/tokenizer.json"
TEMPLATE = (REPO / "tests/python/data/chat_templates/Qwen2-VL-7B-Instruct.jinja").read_text()
PICTURES, CLIPS = 14, 6
SEQ_LEN = 2048

fetch_vocabs()

pytestmark = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs ffmpeg")

FIELDS = {
    "pictures": [{"name": "images", "kind": "image", "max_items": 4},
                 {"name": "video", "kind": "video", "max_items": 1},
                 {"name": "conversation", "kind": "conversation", "key": "conversations"}],
    "clips": [{"name": "images", "kind": "image", "max_items": 4},
              {"name": "video", "kind": "video", "max_items": 1},
              {"name": "conversation", "kind": "conversation", "key": "conversations"}],
}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix_ops")
    rng = np.random.default_rng(11)
    (root / "pictures").mkdir()
    sizes = [(120, 90), (56, 56), (200, 60), (64, 160)]
    names = []
    for k, (w, h) in enumerate(sizes):
        name = f"p{k}.png"
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(root / "pictures" / name)
        names.append(name)
    lines = []
    for i in range(PICTURES):
        n = i % 4
        question = "<image>\n" * n + f"Picture question {i}: " + "what " * int(rng.integers(1, 9))
        lines.append(json.dumps({
            "id": f"pic{i:02d}", "images": [names[(i + j) % len(names)] for j in range(n)],
            "conversations": [{"from": "human", "value": question},
                              {"from": "gpt", "value": "An answer. " * int(rng.integers(1, 6))}]}))
    (root / "pictures" / "manifest.jsonl").write_text("\n".join(lines) + "\n")

    (root / "clips").mkdir()
    lines = []
    for i in range(CLIPS):
        w, h, frames = (64 + 8 * i, 48, 12 + 2 * i)
        video = rng.integers(0, 256, (frames, h, w, 3), dtype=np.uint8)
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24",
                        "-s", f"{w}x{h}", "-r", "8", "-i", "-", "-c:v", "libx264rgb", "-qp", "0",
                        "-pix_fmt", "rgb24", str(root / "clips" / f"c{i}.mp4")],
                       input=video.tobytes(), check=True)
        lines.append(json.dumps({
            "id": f"clip{i}", "video": [f"c{i}.mp4"],
            "conversations": [{"from": "human", "value": f"<video>\nClip question {i}?"},
                              {"from": "gpt", "value": "It flickers. " * (1 + i % 3)}]}))
    (root / "clips" / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    return root


def own_ops(entry):
    if entry == "pictures":
        return [ops.decode(field="images"),
                ops.smart_resize(preset="qwen2_vl", field="images", max_pixels=50176),
                ops.vision_patchify(preset="qwen2_vl", field="images")]
    return [ops.video_patchify(preset="qwen2_vl", field="video", fps=4, max_pixels=28 * 28 * 8)]


def shared_ops(images=True, videos=True):
    return [ops.tokenize(tokenizer=str(TOKENIZER), chat_template=TEMPLATE, preset="qwen2_vl",
                         grid_field="image_grid_thw" if images else "",
                         video_grid_field="video_grid_thw" if videos else "",
                         pad=False, max_length=4096),
            ops.vision_rope_index(preset="qwen2_vl", grid_field="image_grid_thw" if images else "",
                                  video_grid_field="video_grid_thw" if videos else "")]


def source_of(data, entry):
    return {"manifest": data / entry / "manifest.jsonl", "root": data / entry,
            "fields": FIELDS[entry]}


def blend(data, **kw):
    mix = [{"name": entry, **source_of(data, entry), "ops": own_ops(entry)}
           for entry in ("pictures", "clips")]
    kw.setdefault("batch_size", 5)
    return headrace.Pipeline(source={"mix": mix, "until": "epochized"}, ops=shared_ops(),
                             seed=4, epochs=2, cpu_threads=2, memory_budget="256MiB", **kw)


def alone(data, entry):
    return headrace.Pipeline(source=source_of(data, entry),
                             ops=own_ops(entry) + shared_ops(images=entry == "pictures",
                                                             videos=entry == "clips"),
                             batch_size=5, seed=4, epochs=1, cpu_threads=2,
                             memory_budget="256MiB")


def media(batch, patches, lengths, grids, count):
    """Per sample: its items' patches (concatenated) and grids, by the count field; a
    batch without the field (an entry alone) has none."""
    n = len(batch["id"])
    if count not in batch:
        return [np.zeros((0,)) for _ in range(n)], [np.zeros((0, 3), np.int64) for _ in range(n)]
    return (token_rows.items(batch, patches, lengths, count),
            token_rows.split(np.asarray(batch[grids]), np.asarray(batch[count])))


TOKENS = ("input_ids", "labels", "position_ids", "mrope_position_ids")


def per_sample(batch):
    tokens = token_rows.tokens(batch, TOKENS)
    images, image_grids = media(batch, "pixel_values", "pixel_values_lengths", "image_grid_thw",
                                "images_count")
    videos, video_grids = media(batch, "pixel_values_videos", "pixel_values_videos_lengths",
                                "video_grid_thw", "video_count")
    out = {}
    for i, sample_id in enumerate(batch["id"]):
        out[sample_id] = {name: tokens[name][i].tobytes() for name in TOKENS}
        out[sample_id].update(images=images[i].tobytes(), image_grids=image_grids[i].tolist(),
                              videos=videos[i].tobytes(), video_grids=video_grids[i].tolist())
    return out


@pytest.fixture(scope="module")
def reference(data):
    out = {}
    for entry, n in (("pictures", PICTURES), ("clips", CLIPS)):
        with headrace.Loader(alone(data, entry)) as loader:
            for batch in loader:
                assert not batch.errors, batch.errors
                out.update(per_sample(batch))
        assert sum(k.startswith(entry[:3]) for k in out) == n
    return out


def test_each_sample_is_its_entrys_pipeline_alone_and_a_batch_holds_both(data, reference):
    mixed_batches, report = 0, None
    with headrace.Loader(blend(data)) as loader:
        for epoch in range(2):
            got = {}
            for batch in loader:
                assert not batch.errors, batch.errors
                samples = per_sample(batch)
                for sample_id, entry in zip(batch["id"], batch["source"]):
                    assert sample_id.startswith(entry[:3]), (sample_id, entry)
                    assert sample_id not in got, f"{sample_id} twice in epoch {epoch}"
                    got[sample_id] = samples[sample_id]
                    if entry == "pictures":
                        assert samples[sample_id]["video_grids"] == []
                    else:
                        assert samples[sample_id]["image_grids"] == []
                        assert len(samples[sample_id]["video_grids"]) == 1
                mixed_batches += len(set(batch["source"])) == 2
                if epoch == 1 and report is None:
                    report = loader.report()  # of the running engine (gone once it ends)
            assert set(got) == set(reference)
            for sample_id, sample in got.items():
                assert sample == reference[sample_id], sample_id
    assert mixed_batches > 0, "no batch held a picture and a clip"
    # The report names each entry's ops, its own and the shared ones.
    by_entry = {}
    for op in report["ops"]:
        by_entry.setdefault(op.get("entry"), []).append(op["name"])
    assert "images[*]: image.decode, image.smart_resize, vision.patchify" in by_entry["pictures"]
    assert "video[*]: video.patchify" in by_entry["clips"]
    assert all("text.tokenize" in names for names in by_entry.values())


def test_packed_segments_are_the_samples_unpacked(data, reference):
    pipeline = blend(data, pack={"seq_len": SEQ_LEN, "window": 4})
    seen = set()
    with headrace.Loader(pipeline) as loader:
        for batch in loader:
            assert not batch.errors, batch.errors
            for sample_id, sample in per_sample(batch).items():
                # The first label of each packed segment is ignored (no label crosses).
                want = dict(reference[sample_id])
                labels = np.frombuffer(want["labels"], np.int64).copy()
                labels[0] = -100
                want["labels"] = labels.tobytes()
                assert sample == want, sample_id
                seen.add(sample_id)
    assert seen == set(reference)


def digest(batch):
    h = hashlib.sha1()
    for name in sorted(batch.keys()):
        value = batch[name]
        h.update((name + (repr(value) if isinstance(value, list) else
                          str(np.asarray(value).shape))).encode())
        if not isinstance(value, list):
            h.update(np.asarray(value).tobytes())
    return h.hexdigest()


def test_a_state_dict_resumes_the_blend_byte_identically(data):
    with headrace.Loader(blend(data)) as loader:
        whole = [digest(b) for b in loader]
    with headrace.Loader(blend(data)) as loader:
        it = iter(loader)
        head = [digest(next(it)) for _ in range(2)]
        state = loader.state_dict()
    with headrace.Loader(blend(data)) as loader:
        loader.load_state_dict(json.loads(json.dumps(state)))
        tail = [digest(b) for b in loader]
    assert head + tail == whole


def test_entry_ops_from_python_must_be_builtin_ops(data):
    mix = [{"name": "pictures", **source_of(data, "pictures"), "ops": [lambda s: s]}]
    with pytest.raises(headrace.ConfigError, match=r"source.mix\[0\].ops\[0\]"):
        headrace.Pipeline(source={"mix": mix}, ops=shared_ops(videos=False))


def test_the_example_runs_over_make_sample_data(tmp_path, headrace_bin):
    """examples/qwen2_vl_blend.yaml as `headrace run` runs it, from a folder holding
    data/blend/{pictures,clips} (make-sample) and data/vocabs: every sample of both
    entries delivered, none failed, and each entry's ops in the report."""
    from e2e_util import run_headrace
    run_headrace(headrace_bin, "make-sample", "--out", tmp_path / "data/blend/pictures",
                 "--samples", 16, "--seed", 3)
    run_headrace(headrace_bin, "make-sample", "--out", tmp_path / "data/blend/clips",
                 "--samples", 4, "--seed", 4, "--modalities", "video")
    (tmp_path / "data" / "vocabs").symlink_to(TOKENIZER.parents[1])
    report = tmp_path / "report.json"
    proc = subprocess.run([str(headrace_bin), "run", str(REPO / "examples/qwen2_vl_blend.yaml"),
                           "--quiet", "--report", str(report), "--set", "trainer.step_ms=1",
                           "--set", "execution.cpu_threads=2"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(report.read_text())
    assert r["errors"]["total"] == 0, r["errors"]
    assert {s["name"]: s["samples"] for s in r["sources"]} == {"pictures": 16, "clips": 4}
    assert {(op.get("entry"), op["name"]) for op in r["ops"]} >= {
        ("pictures", "images[*]: image.decode, image.smart_resize, vision.patchify"),
        ("clips", "video[*]: video.patchify"), ("pictures", "text.tokenize"),
        ("clips", "text.tokenize")}
