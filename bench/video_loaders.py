"""Video at the decoder's limit (issue 31): Headrace against the loaders a careful user
writes, side by side in one run, interleaved rounds, medians.

Clips as Kinetics (640x360, 10 s at 30 fps, a keyframe a second, libx264 defaults) with
noise on the content (lavfi ``noise=alls=N:allf=t``: testsrc2 alone compresses to almost
nothing and decodes faster than real video), and the same at 1920x1080. Per sample 8
frames at the times spread over the clip (the middle of each eighth), 224x224 RGB uint8
[8, 3, 224, 224]; batches of 8 (4 at 1080p); 2 epochs per run, timed from the loader's
creation; 2 cores (2 CPU threads / 2 worker processes).

- headrace exact: ``video.decode`` as it is by default (frames byte-identical to a decode of
  every frame).
- headrace keyframe: ``video.decode`` with ``seek: keyframe`` (the keyframe nearest each
  time: not the same frames, one frame decoded per frame taken).
- pyav seek: a PyTorch DataLoader (num_workers=2) over PyAV that, for each time, seeks to
  the keyframe before it and decodes forward to the frame shown then, scaled by
  ``frame.to_ndarray(width=, height=, format="rgb24")`` (libswscale), one decoder thread
  per worker as the 2 workers have a core each.
- torchcodec: ``VideoDecoder(path).get_frames_played_at(seconds=times)``, resized, in the
  same DataLoader, when torchcodec imports (see bench/RESULTS.md: the PyPI wheel for torch
  2.13 links CUDA's libraries and does not load with the CPU torch).

    python bench/video_loaders.py [--clips 16] [--clips-1080 4] [--rounds 3] [--noise 10]
        [--json bench/video_loaders.json]
"""
import argparse
import json
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

import headrace
import headrace.torch

FRAMES, SIDE = 8, 224


def sh(*args):
    subprocess.run([str(a) for a in args], check=True, capture_output=True)


def make_clips(root: Path, n: int, size: str, noise: int, tag: str):
    lines = []
    for i in range(n):
        path = root / f"{tag}{i:03d}.mp4"
        sh("ffmpeg", "-v", "error", "-f", "lavfi", "-i",
           f"testsrc2=s={size}:r=30:d=10,hue=h={i * 11},noise=alls={noise}:allf=t",
           "-c:v", "libx264", "-g", "30", "-pix_fmt", "yuv420p", "-y", path)
        lines.append(json.dumps({"id": f"{tag}{i}", "video": str(path)}))
    (root / f"{tag}.jsonl").write_text("\n".join(lines) + "\n")
    return sorted(root.glob(f"{tag}*.mp4"))


def times_of(duration: float):
    return [(k + 0.5) * duration / FRAMES for k in range(FRAMES)]


def first_slice_is_reference(data: bytes) -> bool:
    """nal_ref_idc of a packet's first slice NAL (MP4's H.264: NAL units behind 4-byte
    big-endian lengths). 0: a picture no other picture references."""
    i = 0
    while i + 4 < len(data):
        size, header = int.from_bytes(data[i:i + 4], "big"), data[i + 4]
        if header & 0x1F in (1, 5):  # a slice of a non-IDR / IDR picture
            return (header >> 5) & 3 != 0
        i += 4 + size
    return True


def decode_floor(path: Path):
    """Frames per sample that any exact decode of the times must decode, and those a decode
    of every frame from each time's keyframe on decodes (the PyAV-seek loader's loop, not
    counting the frames it decodes past the time to see it passed). The floor: every
    reference picture from the keyframe before the frame shown up to it in decode order,
    and the frame itself; a picture that nothing references can be left undecoded (what
    video.decode's exact path does), a reference cannot without changing what follows it."""
    import av
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        packets = [(float(p.pts * stream.time_base), p.is_keyframe,
                    first_slice_is_reference(bytes(p)))
                   for p in container.demux(stream) if p.size]
        duration = float(stream.duration * stream.time_base)
    start = min(pts for pts, _, _ in packets)
    floor = every = 0
    for t in times_of(duration):
        shown = max(pts for pts, _, _ in packets if pts <= start + t + 1e-9)
        at = next(i for i, (pts, _, _) in enumerate(packets) if pts == shown)
        key = max(i for i in range(at + 1) if packets[i][1] and packets[i][0] <= shown)
        floor += 1 + sum(1 for _, _, ref in packets[key:at] if ref)
        every += sum(1 for pts, _, _ in packets[key:] if pts <= shown)
    return floor, every


def headrace_loader(root: Path, tag: str, batch: int, seek: str):
    return headrace.torch.TorchLoader(headrace.Pipeline(
        source={"manifest": root / f"{tag}.jsonl", "root": "/", "allow_absolute_paths": True,
                "fields": [{"name": "video", "kind": "video", "required": True}]},
        ops=[headrace.ops.video_decode(frames=FRAMES, width=SIDE, height=SIDE, seek=seek)],
        batch_size=batch, seed=1, cpu_threads=2, memory_budget="1GiB", epochs=2))


class PyAvSeek(Dataset):
    def __init__(self, paths):
        self.paths = paths

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        import av
        frames = []
        with av.open(str(self.paths[i])) as container:
            stream = container.streams.video[0]
            stream.thread_count = 1
            duration = float(stream.duration * stream.time_base)
            for t in times_of(duration):
                container.seek(int(t / stream.time_base), stream=stream, backward=True,
                               any_frame=False)
                shown = None
                for frame in container.decode(stream):
                    if shown is not None and frame.time > t + 1e-6:
                        break
                    shown = frame
                frames.append(shown.to_ndarray(width=SIDE, height=SIDE, format="rgb24"))
        clip = np.stack(frames).transpose(0, 3, 1, 2)  # T, C, H, W
        return {"video": torch.from_numpy(np.ascontiguousarray(clip))}


class TorchCodecClips(Dataset):
    def __init__(self, paths):
        self.paths = paths

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        from torchcodec.decoders import VideoDecoder
        decoder = VideoDecoder(str(self.paths[i]), num_ffmpeg_threads=1)
        duration = decoder.metadata.duration_seconds
        frames = decoder.get_frames_played_at(seconds=times_of(duration)).data  # T, C, H, W
        frames = torch.nn.functional.interpolate(frames, size=(SIDE, SIDE), mode="bilinear",
                                                 antialias=False).to(torch.uint8)
        return {"video": frames}


def dataloader(dataset, batch):
    return DataLoader(dataset, batch_size=batch, num_workers=2, shuffle=True,
                      persistent_workers=True)


def time_run(make_loader, epochs=2):
    """Seconds from creating the loader to the end of its last epoch, the samples, and
    Headrace's frames decoded per frame taken (None for the others)."""
    start = time.perf_counter()
    loader = make_loader()
    samples = 0
    per_taken = None
    for epoch in range(epochs):
        for batch in loader:
            samples += next(iter(batch.values())).shape[0]
        inner = getattr(loader, "loader", None)
        if epoch == 0 and inner is not None:  # the report of the running engine
            ops = inner.report().get("ops", [])
            per_taken = next((op.get("frames_decoded_per_taken") for op in ops
                              if op["name"] == "video.decode"), None)
    elapsed = time.perf_counter() - start
    return elapsed, samples, per_taken


def bench_size(root, tag, paths, batch, rounds, torchcodec_ok):
    loaders = {
        "headrace_exact": lambda: headrace_loader(root, tag, batch, "exact"),
        "headrace_keyframe": lambda: headrace_loader(root, tag, batch, "keyframe"),
        "pyav_seek_dataloader": lambda: dataloader(PyAvSeek(paths), batch),
    }
    if torchcodec_ok:
        loaders["torchcodec_dataloader"] = lambda: dataloader(TorchCodecClips(paths), batch)
    rates = {name: [] for name in loaders}
    per_taken = {}
    names = list(loaders)
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]  # interleaved, rotated
        for name in order:
            elapsed, samples, ratio = time_run(loaders[name])
            rates[name].append(samples / elapsed)
            if ratio is not None:
                per_taken[name] = ratio
            print(f"  {tag} round {r} {name:24s} {samples / elapsed:7.2f} samples/s", flush=True)
    med = {name: statistics.median(v) for name, v in rates.items()}
    refs = {k: v for k, v in med.items() if not k.startswith("headrace")}
    best_ref = max(refs.values())
    return {
        "samples_per_s_median": med,
        "samples_per_s_rounds": rates,
        "frames_decoded_per_taken": per_taken,
        "ratio_exact_vs_best_reference": med["headrace_exact"] / best_ref,
        "ratio_keyframe_vs_best_reference": med["headrace_keyframe"] / best_ref,
        "best_reference": max(refs, key=refs.get),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clips", type=int, default=16)
    ap.add_argument("--clips-1080", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--noise", type=int, default=10)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torchcodec_ok, torchcodec_error = True, None
    try:
        import torchcodec.decoders  # noqa: F401
    except Exception as e:  # noqa: BLE001 (any failure to load it is reported)
        torchcodec_ok, torchcodec_error = False, f"{type(e).__name__}: {e}".splitlines()[0]
        print(f"torchcodec not measured: {torchcodec_error}")
    root = Path(tempfile.mkdtemp(prefix="headrace-video-loaders-"))
    sizes = {"360p": ("640x360", a.clips, 8), "1080p": ("1920x1080", a.clips_1080, 4)}
    result = {}
    for tag, (size, n, batch) in sizes.items():
        if n <= 0:
            continue
        paths = make_clips(root, n, size, a.noise, tag)
        floors = [decode_floor(p) for p in paths]
        result[tag] = {"clips": n, "size": size, "batch": batch,
                       "exact_floor_frames_per_taken":
                           statistics.median(f for f, _ in floors) / FRAMES,
                       "every_frame_from_keyframe_per_taken":
                           statistics.median(e for _, e in floors) / FRAMES,
                       **bench_size(root, tag, paths, batch, a.rounds, torchcodec_ok)}
        row = result[tag]
        print(f"{tag}: an exact decode must decode {row['exact_floor_frames_per_taken']:.2f} "
              f"frames per frame taken (every reference from the keyframe on), a decode of every "
              f"frame from the keyframe {row['every_frame_from_keyframe_per_taken']:.2f}; "
              f"headrace exact decoded "
              f"{row['frames_decoded_per_taken'].get('headrace_exact', float('nan')):.2f}")
        print(f"{tag}: " + ", ".join(f"{k} {v:.2f}/s" for k, v in row["samples_per_s_median"].items())
              + f"; exact {row['ratio_exact_vs_best_reference']:.2f}x, keyframe "
                f"{row['ratio_keyframe_vs_best_reference']:.2f}x the best reference "
                f"({row['best_reference']})")
    import av
    out = {
        "machine": f"{platform.node()} ({platform.machine()}), torch {torch.__version__}, "
                   f"av {av.__version__}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "noise": a.noise, "rounds": a.rounds, "torchcodec_error": torchcodec_error, **result,
    }
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
