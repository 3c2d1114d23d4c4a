"""Qwen2-VL / Qwen3-VL video SFT input against transformers' video path (issue 27).

Headrace: a video field -> video.patchify (preset qwen2_vl | qwen3_vl) and text.tokenize
with Qwen2's tokenizer.json, the Qwen2-VL chat template, pad: false, video_grid_field
video_grid_thw (and for Qwen3-VL video_timestamps_field), through `headrace.Loader`.

The reference. transformers' Qwen2VLVideoProcessor and Qwen3VLVideoProcessor import
torchvision, which the venv does not have (and it is not added: it must not disturb the
tokenizer loading the other tests rely on), so the video processors cannot be built.
The reference is therefore written here from their published code (transformers 5.23,
models/qwen2_vl/video_processing_qwen2_vl.py, models/qwen3_vl/video_processing_qwen3_vl.py),
step by step, with transformers' own functions wherever they import without torchvision:
  - frames: sample_frames' rules verbatim (Qwen2: torch.arange(0, total, total / n).int();
    Qwen3: np.linspace(0, total - 1, n).round()), on the clip's frames as generated (the
    clips are lossless RGB H.264, libx264rgb -qp 0, so decoding gives those bytes);
  - size: transformers' qwen2_vl smart_resize (imported) over the preset's video range;
    Qwen3-VL's video smart_resize copied (its module imports torchvision);
  - resize: PIL bicubic per frame. transformers' video processors resize uint8 tensors
    with torchvision (bicubic, antialias), which differs from PIL by about 1 level per
    pixel; Headrace resamples videos as its image path does (PIL's filter, byte for byte),
    so here PIL is the reference and the pixels are compared exactly;
  - rescale + normalize in float32 and the processors' patchify (view / permute) in numpy;
  - timestamps: Qwen3VLProcessor._calculate_timestamps (imported);
  - text: the Qwen2-VL chat template on messages with {"type": "video"} items
    (tokenizer.apply_chat_template), then each <|video_pad|> replaced by
    Qwen2VLProcessor.replace_video_token / Qwen3VLProcessor.replace_video_token
    (imported, called on a stand-in holding the processor's attributes), then the
    tokenizer. (No Qwen3-VL chat template is checked in; its video item renders the same
    <|vision_start|><|video_pad|><|vision_end|>.)

Asserted per sample, over a single video field, a list (max_items 2) and a padded list,
on clips of odd sizes, frame rates and lengths (one shorter than
min_frames, one with an odd number of sampled frames): video_grid_thw identical, token
counts identical, input_ids identical, pixel_values_videos max / mean abs diff printed
and asserted 0; a sample with 2 <video> and 1 video is one error naming both counts.
"""
import json
import math
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

import headrace
from conftest import fetch_vocabs

from transformers import Qwen2TokenizerFast  # noqa: E402
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize  # noqa: E402
from transformers.models.qwen2_vl.processing_qwen2_vl import Qwen2VLProcessor  # noqa: E402
from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor  # noqa: E402

ops = headrace.ops
REPO = Path(__file__).resolve().parents[2]
TOKENIZER = REPO / "data/vocabs/qwen2/tokenizer.json"
TEMPLATE = (REPO / "tests/python/data/chat_templates/Qwen2-VL-7B-Instruct.jinja").read_text()
BAD = 3  # the manifest line of the mismatched sample
MAX_ITEMS = 2
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

# preset -> patch, merge, T, mean, std, video min/max pixels (ops/vision/preset.h).
PRESETS = {
    "qwen2_vl": (14, 2, 2, CLIP_MEAN, CLIP_STD, 3136, 12845056),
    "qwen3_vl": (16, 2, 2, (0.5,) * 3, (0.5,) * 3, 4096, 25165824),
}
# Small bounds so that the clips are resized down and up (max_pixels set on both sides).
MAX_PIXELS = {"qwen2_vl": 28 * 28 * 12, "qwen3_vl": 32 * 32 * 40}
FPS = 2.0

fetch_vocabs()

pytestmark = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs ffmpeg")

# (name, width, height, fps, frames)
CLIPS = [("a.mp4", 90, 60, 10, 23), ("b.mp4", 200, 120, 25, 40), ("c.mp4", 64, 48, 5, 3),
         ("d.mp4", 77, 51, 12, 30), ("e.mp4", 48, 160, 8, 45)]


def frames_of(width, height, frames, seed):
    rng = np.random.default_rng(seed)
    x = np.linspace(0, 1, width)[None, :, None]
    y = np.linspace(0, 1, height)[:, None, None]
    c = np.arange(3)[None, None, :]
    out = []
    for t in range(frames):
        base = 127 + 90 * np.sin(6 * x + 4 * y + c + 0.3 * t) + 30 * np.cos(40 * x * y + c)
        out.append(np.clip(base + rng.normal(0, 12, (height, width, 3)), 0, 255).astype(np.uint8))
    return np.stack(out)


def encode(path: Path, video: np.ndarray, fps: int):
    t, h, w, _ = video.shape
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24",
                    "-s", f"{w}x{h}", "-r", str(fps), "-i", "-", "-c:v", "libx264rgb",
                    "-qp", "0", "-pix_fmt", "rgb24", str(path)],
                   input=video.tobytes(), check=True)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("vlm_video")
    clips = {}
    for i, (name, w, h, fps, n) in enumerate(CLIPS):
        video = frames_of(w, h, n, i)
        encode(root / name, video, fps)
        clips[name] = (video, fps)
    records, lines = {}, []
    q = ["What happens in this clip?", "Describe the motion.", "Is it getting brighter?"]
    for i in range(10):
        name = CLIPS[i % len(CLIPS)][0]
        if i % 2:
            turns = [("human", "<video>\n" + q[i % 3]), ("gpt", "Waves of colour drift.")]
        else:
            turns = [("human", "Watch: <video> " + q[i % 3]), ("gpt", "It moves slowly."),
                     ("human", "Anything else?"), ("gpt", "No.")]
        # The list form (max_items): 0, 1 or 2 videos, each its own <video>.
        videos = [CLIPS[(i + j) % len(CLIPS)][0] for j in range(i % 3)]
        list_turns = ([("human", "<video> then <video>: " + q[i % 3]) if len(videos) == 2
                       else ("human", "<video>\n" + q[i % 3]) if videos else ("human", q[i % 3]),
                       ("gpt", "Colour waves.")])
        record = {"id": f"s{i:02d}", "video": name, "videos": videos,
                  "conversations": [{"from": a, "value": b} for a, b in turns],
                  "list_conversations": [{"from": a, "value": b} for a, b in list_turns]}
        records[record["id"]] = record
        lines.append(json.dumps(record))
    bad = {"id": "bad", "video": "a.mp4", "videos": ["a.mp4"],
           "conversations": [{"from": "human", "value": "<video><video>Both?"},
                             {"from": "gpt", "value": "Yes."}]}
    bad["list_conversations"] = bad["conversations"]
    lines.insert(BAD, json.dumps(bad))
    (root / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    return root, records, clips


def pipeline(root: Path, preset: str, mode: str = "single"):
    if mode == "single":
        fields = [{"name": "video", "kind": "video", "required": True},
                  {"name": "conversation", "kind": "conversation", "key": "conversations"}]
        field = "video"
    else:
        fields = [{"name": "videos", "kind": "video", "max_items": MAX_ITEMS,
                   "pad_items": mode == "padded"},
                  {"name": "conversation", "kind": "conversation", "key": "list_conversations"}]
        field = "videos"
    tokenize = dict(tokenizer=str(TOKENIZER), chat_template=TEMPLATE, preset=preset,
                    video_grid_field="video_grid_thw", pad=False, max_length=8192)
    if preset == "qwen3_vl":
        tokenize["video_timestamps_field"] = "video_timestamps"
    return headrace.Pipeline(
        source={"manifest": root / "manifest.jsonl", "root": root, "fields": fields},
        ops=[ops.video_patchify(preset=preset, fps=FPS, max_pixels=MAX_PIXELS[preset],
                                field=field),
             ops.tokenize(**tokenize)],
        batch_size=4, seed=1, cpu_threads=2, memory_budget="256MiB", shuffle=False,
        overrides={"errors.max_error_rate": 0.9})


# --- the reference ---------------------------------------------------------------------

def sample_indices(preset, total, video_fps, t=2, min_frames=4, max_frames=768):
    if preset == "qwen3_vl":  # Qwen3VLVideoProcessor.sample_frames
        n = int(total / video_fps * FPS)
        n = min(max(n, min_frames), max_frames, total)
        return np.linspace(0, total - 1, n).round().astype(int)
    # Qwen2VLVideoProcessor.sample_frames (fps given)
    max_frames = math.floor(min(max_frames, total) / t) * t
    n = total / video_fps * FPS
    n = min(max(n, min_frames), max_frames, total)
    n = math.floor(n / t) * t
    return torch.arange(0, total, total / n).int().numpy()


def qwen3_smart_resize(num_frames, height, width, temporal_factor, factor, min_pixels,
                       max_pixels):
    """transformers' models/qwen3_vl/video_processing_qwen3_vl.py smart_resize, verbatim."""
    if num_frames < temporal_factor:
        raise ValueError(f"t:{num_frames} must be larger than temporal_factor:{temporal_factor}")
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height = int(height * scale)
        width = int(width * scale)
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    t_bar = round(num_frames / temporal_factor) * temporal_factor
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((num_frames * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (num_frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def patchify(videos, patch_size, merge_size, temporal_patch_size):
    """The video processors' patchify (view + permute), in numpy; videos [1, T, C, H, W]."""
    b, n, c, h, w = videos.shape
    if pad := -n % temporal_patch_size:
        videos = np.concatenate([videos, np.repeat(videos[:, -1:], pad, axis=1)], axis=1)
        n += pad
    gt, gh, gw = n // temporal_patch_size, h // patch_size, w // patch_size
    p = videos.reshape(b, gt, temporal_patch_size, c, gh // merge_size, merge_size, patch_size,
                       gw // merge_size, merge_size, patch_size)
    p = p.transpose(0, 1, 4, 7, 5, 8, 3, 2, 6, 9)
    return p.reshape(b * gt * gh * gw, c * temporal_patch_size * patch_size * patch_size), \
        (gt, gh, gw)


def reference_video(preset, video, video_fps):
    patch, merge, t, mean, std, min_pixels, _ = PRESETS[preset]
    max_pixels = MAX_PIXELS[preset]
    indices = sample_indices(preset, len(video), video_fps, t)
    frames = video[indices]
    n, h, w, _ = frames.shape
    if preset == "qwen3_vl":
        rh, rw = qwen3_smart_resize(n, h, w, t, patch * merge, min_pixels, max_pixels)
    else:
        rh, rw = smart_resize(h, w, factor=patch * merge, min_pixels=min_pixels,
                              max_pixels=max_pixels)
    resized = np.stack([np.asarray(Image.fromarray(f).resize((rw, rh), Image.BICUBIC))
                        for f in frames])
    x = (resized.astype(np.float64) * (1 / 255)).astype(np.float32)
    x = (x - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    pixels, grid = patchify(x.transpose(0, 3, 1, 2)[None], patch, merge, t)
    return pixels, grid, indices


def reference_text(preset, tokenizer, turns, videos):
    """input_ids as the processor makes them; videos: (grid, indices, fps) each."""
    roles = {"human": "user", "gpt": "assistant"}
    messages = []
    for turn in turns:
        text = turn["value"]
        if "<video>" not in text:
            messages.append({"role": roles[turn["from"]], "content": text})
            continue
        content = []
        for i, part in enumerate(text.split("<video>")):
            if i:
                content.append({"type": "video"})
            if part:
                content.append({"type": "text", "text": part})
        messages.append({"role": roles[turn["from"]], "content": content})
    text = tokenizer.apply_chat_template(messages, tokenize=False, chat_template=TEMPLATE)
    inputs = {"video_grid_thw": np.asarray([g for g, _, _ in videos]).reshape(-1, 3),
              "video_metadata": [SimpleNamespace(fps=f, frames_indices=list(i))
                                 for _, i, f in videos]}
    stand_in = SimpleNamespace(video_processor=SimpleNamespace(merge_size=2, temporal_patch_size=2),
                               video_token="<|video_pad|>", vision_start_token="<|vision_start|>",
                               vision_end_token="<|vision_end|>")
    stand_in._calculate_timestamps = lambda *a: Qwen3VLProcessor._calculate_timestamps(
        stand_in, *a)
    replace = (Qwen3VLProcessor if preset == "qwen3_vl" else Qwen2VLProcessor).replace_video_token
    # As the processor: each video token in turn becomes its own video's expansion.
    parts = text.split("<|video_pad|>")
    assert len(parts) == len(videos) + 1
    text = parts[0] + "".join(replace(stand_in, inputs, v) + parts[v + 1]
                              for v in range(len(videos)))
    return tokenizer(text)["input_ids"]


def split(values, lengths):
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return [values[offsets[i]:offsets[i + 1]] for i in range(len(lengths))]


@pytest.fixture(scope="module")
def tokenizer():
    return Qwen2TokenizerFast(tokenizer_file=str(TOKENIZER), eos_token="<|im_end|>",
                              pad_token="<|endoftext|>")


@pytest.mark.parametrize("mode", ["single", "list", "padded"])
@pytest.mark.parametrize("preset", ["qwen2_vl", "qwen3_vl"])
def test_the_pipeline_equals_the_processors_video_path(dataset, tokenizer, preset, mode):
    root, records, clips = dataset
    video_pad = tokenizer.convert_tokens_to_ids("<|video_pad|>")
    seen, errors, diffs, videos_seen = set(), [], [], 0
    with headrace.Loader(pipeline(root, preset, mode)) as loader:
        for batch in loader:
            errors += batch.errors
            n = len(batch["id"])
            ids = split(np.asarray(batch["input_ids"]), np.asarray(batch["input_ids_lengths"]))
            pixels = split(np.asarray(batch["pixel_values_videos"]),
                           np.asarray(batch["pixel_values_videos_lengths"]))
            stamps = split(np.asarray(batch["video_timestamps"]),
                           np.asarray(batch["video_timestamps_lengths"]))
            grids = np.asarray(batch["video_grid_thw"])
            count = (np.ones(n, np.int64) if mode == "single"
                     else np.asarray(batch["videos_count"]))
            # One entry per video in every per-video field (padded: the grids [n, items, 3]).
            if mode == "padded":
                assert grids.shape == (n, MAX_ITEMS, 3)
                assert not grids[np.arange(MAX_ITEMS)[None, :] >= count[:, None]].any()
                grids = np.concatenate([grids[i, :count[i]] for i in range(n)])
            assert grids.shape == (int(count.sum()), 3)
            assert len(pixels) == len(stamps) == int(count.sum())
            per_sample = split(np.arange(int(count.sum())), count)
            for i in range(n):
                sid = batch["id"][i]
                record = records[sid]
                names = [record["video"]] if mode == "single" else record["videos"]
                turns = record["conversations" if mode == "single" else "list_conversations"]
                assert len(per_sample[i]) == len(names), sid
                want_videos, got_ids = [], ids[i]
                for k, name in zip(per_sample[i], names):
                    video, fps = clips[name]
                    want_pixels, want_grid, indices = reference_video(preset, video, fps)
                    assert tuple(grids[k]) == want_grid, sid
                    assert pixels[k].shape == want_pixels.shape, sid
                    diff = np.abs(pixels[k].astype(np.float64) - want_pixels.astype(np.float64))
                    diffs.append((diff.max(), diff.mean(), diff.size))
                    want_stamps = Qwen3VLProcessor._calculate_timestamps(None, list(indices),
                                                                         fps, 2)
                    assert [f"{s:.1f}" for s in stamps[k]] == \
                        [f"{s:.1f}" for s in want_stamps], sid
                    want_videos.append((want_grid, indices, fps))
                    videos_seen += 1
                want_ids = reference_text(preset, tokenizer, turns, want_videos)
                assert int((got_ids == video_pad).sum()) == sum(
                    int(np.prod(g)) // 4 for g, _, _ in want_videos), sid
                assert got_ids.tolist() == want_ids, sid
                seen.add(sid)
    assert seen == set(records)
    assert videos_seen >= 9  # single: 10; list: 0, 1, 2 per sample
    worst = max(d[0] for d in diffs)
    mean = sum(d[1] * d[2] for d in diffs) / sum(d[2] for d in diffs)
    print(f"{preset} {mode}: {len(seen)} samples, {videos_seen} videos: pixel_values_videos "
          f"max abs diff {worst:.3g}, mean abs diff {mean:.3g}")
    assert worst == 0
    mismatch = [e for e in errors if "video placeholders" in e]
    assert len(mismatch) == 1 and len(errors) == 1, errors
    assert f"index {BAD}," in mismatch[0], mismatch[0]
    assert "2 video placeholders ('<video>') and the sample 1 video (video_grid_thw)" in \
        mismatch[0], mismatch[0]


@pytest.mark.parametrize("preset", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_rope_index_of_video_samples_equals_get_rope_index(dataset, preset):
    """vision.rope_index (video_grid_field) after the video chain: each sample's position
    ids and delta equal the preset's model's get_rope_index (tiny config, test_mrope.py)
    on the same ids and video grids; Qwen2.5-VL's videos with second_per_grid_ts =
    temporal_patch_size / fps (1.0 s at 2 fps), as its processor passes them."""
    from test_mrope import tiny_model  # noqa: E402
    root, records, _ = dataset
    model = tiny_model(preset)
    base = "qwen3_vl" if preset == "qwen3_vl" else "qwen2_vl"
    tokenize = dict(tokenizer=str(TOKENIZER), chat_template=TEMPLATE, preset=preset,
                    video_grid_field="video_grid_thw", pad=False, max_length=8192)
    if preset == "qwen3_vl":
        tokenize["video_timestamps_field"] = "video_timestamps"
    spec = headrace.Pipeline(
        source={"manifest": root / "manifest.jsonl", "root": root,
                "fields": [{"name": "videos", "kind": "video", "max_items": MAX_ITEMS},
                           {"name": "conversation", "kind": "conversation",
                            "key": "list_conversations"}]},
        ops=[ops.video_patchify(preset=preset, fps=FPS, max_pixels=MAX_PIXELS[base],
                                field="videos"),
             ops.tokenize(**tokenize),
             ops.vision_rope_index(preset=preset, grid_field="", video_grid_field="video_grid_thw",
                                   seconds_per_grid=2 / FPS)],
        batch_size=4, seed=1, cpu_threads=2, memory_budget="256MiB", shuffle=False,
        overrides={"errors.max_error_rate": 0.9})
    seen, videos = 0, 0
    with headrace.Loader(spec) as loader:
        for batch in loader:
            ids = split(np.asarray(batch["input_ids"]), np.asarray(batch["input_ids_lengths"]))
            pos = split(np.asarray(batch["mrope_position_ids"]),
                        np.asarray(batch["mrope_position_ids_lengths"]))
            deltas = np.asarray(batch["rope_deltas"])
            grids = split(np.asarray(batch["video_grid_thw"]), np.asarray(batch["videos_count"]))
            for i in range(len(ids)):
                x = torch.as_tensor(ids[i][None], dtype=torch.int64)
                mm = torch.zeros_like(x, dtype=torch.int32)
                mm[x == model.config.image_token_id] = 1
                mm[x == model.config.video_token_id] = 2
                kw = {}
                if len(grids[i]):
                    kw["video_grid_thw"] = torch.as_tensor(grids[i])
                    if preset == "qwen2_5_vl":
                        kw["second_per_grid_ts"] = torch.full((len(grids[i]),), 2 / FPS)
                with torch.no_grad():
                    want, want_delta = model.get_rope_index(x, mm, **kw)
                assert np.array_equal(pos[i], want[:, 0].numpy().T), (preset, batch["id"][i])
                assert deltas[i, 0] == want_delta[0, 0], (preset, batch["id"][i])
                videos += len(grids[i])
                seen += 1
    assert seen == len(records) and videos >= 9


def test_the_example_runs_over_make_sample_data(tmp_path, headrace_bin):
    """examples/qwen2_vl_video.yaml as `headrace run` runs it, from a folder holding
    data/sample (make-sample --modalities video) and data/vocabs: every sample delivered,
    none failed."""
    from e2e_util import run_headrace
    run_headrace(headrace_bin, "make-sample", "--out", tmp_path / "data" / "sample",
                 "--samples", 12, "--seed", 3, "--modalities", "video")
    (tmp_path / "data" / "vocabs").symlink_to(TOKENIZER.parents[1])
    report = tmp_path / "report.json"
    proc = subprocess.run([str(headrace_bin), "run",
                           str(REPO / "examples" / "qwen2_vl_video.yaml"), "--quiet",
                           "--report", str(report), "--set", "trainer.step_ms=1",
                           "--set", "execution.cpu_threads=2"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(report.read_text())
    assert r["samples"] == 12 and r["errors"]["total"] == 0, r["errors"]
