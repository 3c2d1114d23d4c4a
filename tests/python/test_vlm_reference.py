"""image.smart_resize and the Qwen-VL patch layout against transformers' Qwen2-VL image
processor (PIL backend, the installed transformers and Pillow) on generated edge images
(issue 27).

How the test reaches Headrace:
  - Whole images go through a real pipeline of the branch's `headrace` module, so that the
    planner's hint pass is part of what is tested: image.decode -> image.smart_resize ->
    image.resize to the size transformers computes -> image.normalize (mean 0, std 1,
    HWC), whose f32 values * 255 round back to the exact bytes. The image.resize gives
    normalize its fixed shape; it is a no-op when smart_resize produced that size, and
    any other size would be resampled and fail the byte comparison. One small dataset
    per image. (The chain with vision.patchify and text.tokenize, against the whole
    Qwen2-VL processor: test_vlm_processor.py.)
  - The size rule on thousands of sizes, the resampling kernel on raw arrays and the patch
    layout on raw images go through `hr_vision_reference_tool`, a test-only C++
    binary built with the tests (src/headrace/ops/vision/reference_tool_main.cc); found
    at $HEADRACE_VISION_TOOL, or beside $HEADRACE_BIN's build folder, or in build/.

Tolerances, all asserted: sizes and grids identical; uint8 pixels identical (max abs
difference 0); pixel_values f32 max abs difference <= 1e-6 (0 expected: the same uint8
input and the same float32 operations), bf16 identical to torch's rounding of the f32.
Each comparison prints its max / mean absolute difference (pytest -s shows them).

The one documented difference (ops/image/README.md, "image.smart_resize"): image.decode
drops alpha, as transformers' load_image (convert("RGB")) does for paths and URLs; a PIL
RGBA image handed to the processor directly is composited on white instead. Both are
measured below; only the first is asserted equal.
"""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import headrace

import transformers  # noqa: E402,F401  (not importorskip: scripts/setup.sh installs it)
from transformers.image_utils import PILImageResampling, SizeDict, load_image  # noqa: E402
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (  # noqa: E402
    Qwen2VLImageProcessorPil, smart_resize)

ops = headrace.ops
REPO = Path(__file__).resolve().parents[2]
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
# preset: (patch, merge, min_pixels, max_pixels, mean, std), from ops/vision/preset.h.
PRESETS = {
    "qwen2_vl": (14, 2, 3136, 12845056, CLIP_MEAN, CLIP_STD),
    "qwen2_5_vl": (14, 2, 3136, 12845056, CLIP_MEAN, CLIP_STD),
    "qwen3_vl": (16, 2, 65536, 16777216, [0.5] * 3, [0.5] * 3),
}
# image.smart_resize without a preset: transformers' class defaults.
DEFAULT_RULE = (14, 2, 56 * 56, 28 * 28 * 1280)


def tool() -> Path:
    candidates = []
    if os.environ.get("HEADRACE_VISION_TOOL"):
        candidates.append(Path(os.environ["HEADRACE_VISION_TOOL"]))
    if os.environ.get("HEADRACE_BIN"):
        candidates.append(Path(os.environ["HEADRACE_BIN"]).parent
                          / "src/headrace/ops/vision/hr_vision_reference_tool")
    candidates.append(REPO / "build/src/headrace/ops/vision/hr_vision_reference_tool")
    for c in candidates:
        if c.exists():
            return c
    raise AssertionError(f"hr_vision_reference_tool not built (looked at {candidates}); "
                         "cmake --build build --target hr_vision_reference_tool")


def report(name: str, got: np.ndarray, want: np.ndarray) -> float:
    assert got.shape == want.shape, f"{name}: shape {got.shape} != {want.shape}"
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    print(f"{name}: shape {got.shape}, max abs diff {diff.max():.3g}, "
          f"mean abs diff {diff.mean():.3g}")
    return float(diff.max())


def photo(width: int, height: int, seed: int = 0, channels: int = 3) -> np.ndarray:
    """Smooth gradients plus texture and noise: detail at every scale."""
    rng = np.random.default_rng(seed)
    x = np.linspace(0, 1, width)[None, :, None]
    y = np.linspace(0, 1, height)[:, None, None]
    c = np.arange(channels)[None, None, :]
    base = 127 + 90 * np.sin(6 * x + 4 * y + c) + 30 * np.cos(40 * x * y + c)
    return np.clip(base + rng.normal(0, 18, (height, width, channels)), 0, 255).astype(np.uint8)


# --- the size rule -------------------------------------------------------------------------

def test_the_size_rule_equals_transformers_on_thousands_of_sizes():
    rng = np.random.default_rng(27)
    sizes = [(w, h) for w in (1, 2, 13, 27, 28, 29, 41, 42, 43, 55, 56, 57, 70, 99, 100)
             for h in (1, 3, 28, 42, 56, 70, 111, 200, 201)]
    sizes += [(int(w), int(h)) for w, h in rng.integers(1, 5000, (3000, 2))]
    sizes += [(int(w), int(h)) for w, h in rng.integers(1, 40000, (500, 2))]
    sizes += [(2 * n, 400) for n in range(195, 206)] + [(400, 2 * n) for n in range(195, 206)]
    sizes += [(1, 200), (1, 201), (200, 1), (12000, 60), (12060, 60), (9000, 9000)]
    stdin = "".join(f"{w} {h}\n" for w, h in sizes)
    for patch, merge, lo, hi in [DEFAULT_RULE] + [p[:4] for p in PRESETS.values()]:
        out = subprocess.run([str(tool()), "sizes", str(patch), str(merge), str(lo), str(hi),
                              "200"], input=stdin, capture_output=True, text=True, check=True)
        lines = out.stdout.splitlines()
        assert len(lines) == len(sizes)
        mismatches, errors = [], 0
        for (w, h), line in zip(sizes, lines):
            try:
                rh, rw = smart_resize(h, w, factor=patch * merge, min_pixels=lo, max_pixels=hi)
                want = f"{rw} {rh}"
            except ValueError:
                want = "error"
                errors += 1
            if line.split(" ")[0] != want.split(" ")[0] or (want != "error" and line != want):
                mismatches.append(((w, h), line, want))
            if want == "error":
                assert f"image {w}x{h}: aspect ratio" in line and "max_aspect_ratio 200" in line
        print(f"factor {patch * merge} [{lo}, {hi}]: {len(sizes)} sizes, {errors} above the "
              f"aspect limit, {len(mismatches)} mismatches")
        assert not mismatches, mismatches[:10]
        assert errors > 10


# --- the resampling kernel -------------------------------------------------------------------

@pytest.mark.parametrize("filter_name", ["bicubic", "bilinear"])
def test_pil_resize_kernel_is_byte_identical_to_pillow(tmp_path, filter_name):
    resample = Image.BICUBIC if filter_name == "bicubic" else Image.BILINEAR
    cases = [(97, 61, 3, 28, 56), (97, 61, 3, 130, 40), (97, 61, 3, 97, 30), (97, 61, 3, 40, 61),
             (640, 480, 3, 644, 476), (33, 2000, 3, 28, 812), (1999, 10, 4, 812, 28),
             (300, 200, 1, 56, 84), (7, 5, 3, 1000, 700), (1500, 1000, 3, 1148, 756)]
    # Random pairs: both pass orders of Pillow 13 (vertical first when the height loses
    # more than twice the pixels the width does) and both directions per axis.
    rng = np.random.default_rng(5)
    cases += [(int(w), int(h), 3, int(ow), int(oh))
              for w, h, ow, oh in rng.integers(2, 400, (40, 4))]
    for i, (w, h, c, ow, oh) in enumerate(cases):
        src = photo(w, h, seed=i, channels=c)
        (tmp_path / "in.raw").write_bytes(src.tobytes())
        subprocess.run([str(tool()), "resize", tmp_path / "in.raw", tmp_path / "out.raw", str(w),
                        str(h), str(c), str(ow), str(oh), filter_name], check=True)
        got = np.frombuffer((tmp_path / "out.raw").read_bytes(), np.uint8).reshape(oh, ow, c)
        if c == 4:  # PIL RGBX: the 4th byte is filtered alike (RGBA would be premultiplied)
            ref = [np.asarray(Image.fromarray(src[..., k]).resize((ow, oh), resample))
                   for k in range(4)]
            want = np.stack(ref, axis=-1)
        else:
            want = np.asarray(Image.fromarray(src[..., 0] if c == 1 else src)
                              .resize((ow, oh), resample)).reshape(oh, ow, c)
        assert report(f"{filter_name} {w}x{h}x{c} -> {ow}x{oh}", got, want) == 0


# --- whole images through the pipeline -------------------------------------------------------

def edge_images(root: Path) -> dict:
    """name -> (file, what the reference loads), all generated."""
    images = root / "images"
    images.mkdir()
    out = {}

    def save(name, im, **kw):
        im.save(images / name, **kw)
        out[name] = images / name

    save("small.png", Image.fromarray(photo(20, 15, 1)))            # below min_pixels
    save("odd.png", Image.fromarray(photo(333, 217, 2)))            # odd sides
    save("wide.png", Image.fromarray(photo(1990, 10, 3)))           # aspect 199
    save("tall.png", Image.fromarray(photo(12, 2400, 4)))           # aspect 200
    save("gray.png", Image.fromarray(photo(301, 199, 5, 1)[..., 0], "L"))
    save("rgba.png", Image.fromarray(np.dstack([photo(256, 190, 6),
                                                photo(256, 190, 7, 1)]), "RGBA"))
    save("q90.jpg", Image.fromarray(photo(640, 480, 8)), quality=90)  # 4:2:0
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 clockwise to display
    save("exif6.jpg", Image.fromarray(photo(400, 300, 9)), quality=92, exif=exif.tobytes())
    # Large: a DCT-scaled decode (1/2) would still cover the target, and give other pixels.
    save("large.jpg", Image.fromarray(photo(3000, 2000, 10)), quality=90)
    return out


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> dict:
    return edge_images(tmp_path_factory.mktemp("vlm_images"))


def reference_resized(path: Path, rule) -> np.ndarray:
    """transformers' PIL path: load_image (EXIF transpose, convert RGB), the processor's
    RGB conversion and its smart resize (PIL bicubic). HWC uint8."""
    patch, merge, lo, hi = rule[:4]
    proc = Qwen2VLImageProcessorPil(patch_size=patch, merge_size=merge)
    chw = proc.process_image(load_image(str(path)), do_convert_rgb=True)
    resized = proc.resize(chw, size=SizeDict(shortest_edge=lo, longest_edge=hi),
                          resample=PILImageResampling.BICUBIC, factor=patch * merge)
    return np.ascontiguousarray(np.asarray(resized).transpose(1, 2, 0))


def headrace_resized(tmp: Path, path: Path, width: int, height: int, **smart) -> np.ndarray:
    """decode -> smart_resize -> resize (to width x height, a no-op if smart_resize made
    it) -> normalize (v / 255), through the branch's pipeline. HWC uint8."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "manifest.jsonl").write_text(json.dumps({"id": path.stem, "image": path.name}) + "\n")
    pipeline = headrace.Pipeline(
        source={"manifest": tmp / "manifest.jsonl", "root": path.parent,
                "fields": [{"name": "image", "kind": "image", "required": True}]},
        ops=[ops.decode(), ops.smart_resize(**smart), ops.resize(width=width, height=height),
             ops.normalize(mean=[0, 0, 0], std=[1, 1, 1], layout="hwc")],
        batch_size=1, seed=1, cpu_threads=1, memory_budget="256MiB", shuffle=False)
    with headrace.Loader(pipeline) as loader:
        (batch,) = list(loader)
        values = np.asarray(batch["image"])[0].copy()
    return np.rint(values * 255).astype(np.uint8)


CASES = [("small.png", {}), ("odd.png", {}), ("wide.png", {}), ("tall.png", {}),
         ("gray.png", {}), ("rgba.png", {}), ("q90.jpg", {}), ("exif6.jpg", {}),
         ("large.jpg", {}), ("odd.png", {"preset": "qwen3_vl"}),
         ("large.jpg", {"preset": "qwen2_5_vl", "max_pixels": 1_000_000}),
         ("odd.png", {"resample": "bicubic", "patch_size": 16, "min_pixels": 128 * 128})]


@pytest.mark.parametrize("name,smart", CASES, ids=[f"{n}-{s}" for n, s in CASES])
def test_decode_and_smart_resize_equal_transformers_pil_path(tmp_path, images, name, smart):
    rule = list(PRESETS[smart["preset"]][:4]) if "preset" in smart else list(DEFAULT_RULE)
    for i, key in enumerate(["patch_size", "merge_size", "min_pixels", "max_pixels"]):
        rule[i] = smart.get(key, rule[i])
    want = reference_resized(images[name], rule)
    height, width = want.shape[:2]
    assert height % (rule[0] * rule[1]) == 0 and width % (rule[0] * rule[1]) == 0
    got = headrace_resized(tmp_path, images[name], width, height, **smart)
    assert report(f"{name} {smart} -> {width}x{height}", got[..., :3], want) == 0


def test_rgba_differs_from_the_processor_fed_a_pil_rgba_image_only_by_compositing(
        tmp_path, images):
    """Headrace drops alpha (= load_image's convert("RGB")). The processor given the PIL
    RGBA image itself composites on white: reported, and equal where alpha is 255."""
    want_dropped = reference_resized(images["rgba.png"], DEFAULT_RULE)
    height, width = want_dropped.shape[:2]
    got = headrace_resized(tmp_path, images["rgba.png"], width, height)[..., :3]
    proc = Qwen2VLImageProcessorPil()
    composited = proc(images=[Image.open(images["rgba.png"])], return_tensors="np")
    dropped = proc(images=[load_image(str(images["rgba.png"]))], return_tensors="np")
    diff = report("rgba: pixel_values, white composite vs alpha dropped",
                  composited["pixel_values"], dropped["pixel_values"])
    assert diff > 0.1  # the inputs do differ: the documented difference is real
    assert report("rgba: headrace vs alpha dropped", got, want_dropped) == 0


# --- the patch layout -------------------------------------------------------------------------

def patchify(tmp: Path, pixels: np.ndarray, preset: str, dtype: str = "f32"):
    h, w, c = pixels.shape
    (tmp / "img.raw").write_bytes(np.ascontiguousarray(pixels).tobytes())
    out = subprocess.run([str(tool()), "patchify", tmp / "img.raw", tmp / "pv.bin", str(w),
                          str(h), str(c), "1", preset, dtype], capture_output=True, text=True,
                         check=True)
    grid = [int(v) for v in out.stdout.split()]
    raw = (tmp / "pv.bin").read_bytes()
    return grid, raw


def processor_for(preset: str, **kw) -> Qwen2VLImageProcessorPil:
    patch, merge, lo, hi, mean, std = PRESETS[preset]
    return Qwen2VLImageProcessorPil(patch_size=patch, merge_size=merge, temporal_patch_size=2,
                                    min_pixels=lo, max_pixels=hi, image_mean=mean,
                                    image_std=std, **kw)


@pytest.mark.parametrize("preset", list(PRESETS))
def test_patch_layout_equals_transformers_without_resize(tmp_path, preset):
    factor = PRESETS[preset][0] * PRESETS[preset][1]
    pixels = photo(factor * 7, factor * 3, seed=11)
    proc = processor_for(preset, do_resize=False)
    want = proc(images=[Image.fromarray(pixels)], return_tensors="np")
    grid, raw = patchify(tmp_path, pixels, preset)
    assert grid == want["image_grid_thw"][0].tolist()
    got = np.frombuffer(raw, np.float32).reshape(want["pixel_values"].shape)
    assert report(f"{preset} pixel_values (do_resize=False)", got, want["pixel_values"]) <= 1e-6
    # bf16: torch's round-to-nearest-even of the same f32 values.
    import torch
    _, raw16 = patchify(tmp_path, pixels, preset, "bf16")
    want16 = torch.from_numpy(want["pixel_values"]).to(torch.bfloat16).view(torch.int16).numpy()
    assert np.array_equal(np.frombuffer(raw16, np.int16).reshape(want16.shape), want16)


@pytest.mark.parametrize("name,preset", [("odd.png", "qwen2_vl"), ("exif6.jpg", "qwen3_vl"),
                                         ("small.png", "qwen2_5_vl"), ("gray.png", "qwen3_vl")])
def test_smart_resize_then_patch_layout_equal_the_processor_with_resize(
        tmp_path, images, name, preset):
    proc = processor_for(preset)
    want = proc(images=[load_image(str(images[name]))], return_tensors="np")
    t, gh, gw = want["image_grid_thw"][0].tolist()
    patch = PRESETS[preset][0]
    resized = headrace_resized(tmp_path, images[name], gw * patch, gh * patch, preset=preset)
    grid, raw = patchify(tmp_path, resized, preset)
    assert grid == [t, gh, gw]
    got = np.frombuffer(raw, np.float32).reshape(want["pixel_values"].shape)
    assert report(f"{name} {preset} pixel_values (with resize)", got,
                  want["pixel_values"]) <= 1e-6
