"""Qwen2-VL video input: Headrace's video.patchify against transformers' own video path,
side by side, interleaved rounds, medians.

The reference is what a Qwen-VL fine-tuning script runs per sample:
``Qwen2VLVideoProcessor(videos=[path], do_sample_frames=True, fps=2)`` — transformers
decodes the file (with torchcodec, the only backend its processors use when it imports:
``get_frames_at`` the sampled indices, exact seek mode, FFmpeg's threads left to FFmpeg),
samples as the model's processor does,
resizes (torchvision, bicubic), normalises and cuts the patches — in a PyTorch
DataLoader with 2 worker processes. Headrace: ``video.patchify`` with the same rules
(Qwen2-VL's preset: fps 2, the same pixel range), 2 CPU threads, from its TorchLoader.
Both give pixel_values_videos [patches, 1176] f32 and video_grid_thw per clip.

Clips as bench/video_loaders.py's (640x360, 10 s at 30 fps, a keyframe a second,
libx264 defaults, noise on the content): 20 frames sampled of 300, 588x336 each. Two
epochs of 16 clips per run, timed from the loader's creation, batches of 4.

The two sides run in their own interpreters, one subprocess per run: Headrace in this
one (the source build in .venv), the reference in ``--ref-python`` (.venv-tv, where
torchvision and torchcodec import; `make bench-vlm-video`).

    python bench/vlm_video.py [--clips 16] [--rounds 3] [--json bench/vlm_video.json]
"""
import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FPS = 2
MIN_PIXELS, MAX_PIXELS = 128 * 28 * 28, 256 * 28 * 28  # <= 256 tokens a frame
BATCH, EPOCHS = 4, 2


def run_headrace(root: Path):
    import headrace
    import headrace.torch
    start = time.perf_counter()
    loader = headrace.torch.TorchLoader(headrace.Pipeline(
        source={"manifest": root / "360p.jsonl", "root": "/", "allow_absolute_paths": True,
                "fields": [{"name": "video", "kind": "video", "required": True}]},
        ops=[headrace.ops.video_patchify(preset="qwen2_vl", fps=FPS, min_pixels=MIN_PIXELS,
                                         max_pixels=MAX_PIXELS)],
        batch_size=BATCH, seed=1, cpu_threads=2, memory_budget="2GiB", epochs=EPOCHS))
    samples, patches, per_taken = 0, 0, None
    for epoch in range(EPOCHS):
        for batch in loader:
            samples += batch["video_grid_thw"].shape[0]
            patches += batch["pixel_values_videos"].shape[0]
        if epoch == 0:
            ops = loader.loader.report().get("ops", [])
            per_taken = next((op.get("frames_decoded_per_taken") for op in ops
                              if op["name"] == "video.patchify"), None)
    return time.perf_counter() - start, samples, patches, per_taken


class Processed:  # a Dataset: the processor's output for clip i
    def __init__(self, paths):
        from transformers import Qwen2VLVideoProcessor
        self.paths = paths
        self.processor = Qwen2VLVideoProcessor(
            size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
            cap_pixels_per_frame=False)  # the rule video.patchify applies (per frame, the range)

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        import torch
        torch.set_num_threads(1)  # a core per worker
        out = self.processor(videos=[str(self.paths[i])], do_sample_frames=True, fps=FPS,
                             return_tensors="pt")
        return out["pixel_values_videos"], out["video_grid_thw"]


def collate(items):
    import torch
    return {"pixel_values_videos": torch.cat([p for p, _ in items]),
            "video_grid_thw": torch.cat([g for _, g in items])}


def run_transformers(root: Path):
    from torch.utils.data import DataLoader
    paths = sorted(root.glob("360p*.mp4"))
    start = time.perf_counter()
    loader = DataLoader(Processed(paths), batch_size=BATCH, num_workers=2,
                        shuffle=True, persistent_workers=True, collate_fn=collate)
    samples, patches = 0, 0
    for _ in range(EPOCHS):
        for batch in loader:
            samples += batch["video_grid_thw"].shape[0]
            patches += batch["pixel_values_videos"].shape[0]
    return time.perf_counter() - start, samples, patches, None


def one_run(side: str, root: Path):
    if side == "headrace":
        elapsed, samples, patches, per_taken = run_headrace(root)
    else:
        elapsed, samples, patches, per_taken = run_transformers(root)
    print(json.dumps({"elapsed": elapsed, "samples": samples, "patches": patches,
                      "frames_decoded_per_taken": per_taken}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clips", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--noise", type=int, default=10)
    ap.add_argument("--ref-python", default=".venv-tv/bin/python")
    ap.add_argument("--json", default=None)
    ap.add_argument("--run", default=None, help=argparse.SUPPRESS)  # one run, in a subprocess
    ap.add_argument("--root", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.run:
        one_run(a.run, Path(a.root))
        return
    sys.path.insert(0, str(Path(__file__).parent))
    from video_loaders import make_clips
    root = Path(tempfile.mkdtemp(prefix="headrace-vlm-video-"))
    make_clips(root, a.clips, "640x360", a.noise, "360p")
    sides = {"headrace": sys.executable, "transformers": a.ref_python}
    rates = {side: [] for side in sides}
    patches = {}
    per_taken = None
    names = list(sides)
    for r in range(a.rounds):
        for side in names[r % len(names):] + names[:r % len(names)]:  # rotated each round
            out = subprocess.run([sides[side], __file__, "--run", side, "--root", root],
                                 check=True, capture_output=True, text=True)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            rates[side].append(row["samples"] / row["elapsed"])
            patches[side] = row["patches"]
            per_taken = row["frames_decoded_per_taken"] or per_taken
            print(f"  round {r} {side:24s} {rates[side][-1]:7.2f} samples/s "
                  f"({row['patches']} patches)", flush=True)
    med = {side: statistics.median(v) for side, v in rates.items()}
    best = max((v, k) for k, v in med.items() if k != "headrace")
    print("medians: " + ", ".join(f"{k} {v:.2f}/s" for k, v in med.items())
          + f"; headrace {med['headrace'] / best[0]:.2f}x the best reference ({best[1]}); "
          f"frames decoded per frame taken {per_taken}")
    out = {
        "machine": f"{platform.node()} ({platform.machine()})",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "clips": a.clips, "rounds": a.rounds, "noise": a.noise, "batch": BATCH,
        "epochs": EPOCHS, "samples_per_s_median": med, "samples_per_s_rounds": rates,
        "patches_per_run": patches, "headrace_frames_decoded_per_taken": per_taken,
        "ratio_vs_best_reference": med["headrace"] / best[0], "best_reference": best[1],
    }
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
