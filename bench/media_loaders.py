"""Video and audio loading: Headrace against what users run today, side by side in one run.

Same files, same work, same cores (2 worker threads / processes), batches collated into
torch tensors on both sides; each side runs 2 epochs, timed from the loader's creation.

- video: N H.264 clips (640x360, 10 s at 30 fps, a keyframe each second, as Kinetics); per sample 8
  frames spread uniformly over the clip, scaled to 224x224 RGB, uint8 [8, 3, 224, 224];
  batch 8. Reference: a PyTorch DataLoader (num_workers=2) over PyAV, decoding the clip
  and keeping the chosen frames (``frame.to_ndarray(width=, height=, format="rgb24")``,
  libswscale as ours), as torchvision's ``read_video`` did before it was deprecated.
- audio: N MP3s (10 s, 44.1 kHz stereo); per sample mono, resampled to 16 kHz, a random
  4 s window; f32 [1, 64000]; batch 16. Reference: a DataLoader (num_workers=2) over
  soundfile (libsndfile) + soxr (torchaudio has no release for this torch), the usual
  pair when torchaudio is not at hand.

The reference packages are not test dependencies: ``make bench-media-loaders`` installs
bench/requirements-media.txt into .venv first.

    python bench/media_loaders.py [--clips 32] [--songs 48] [--json bench/media_loaders.json]
"""
import argparse
import json
import platform
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
SECONDS, RATE = 4.0, 16000


def sh(*args):
    subprocess.run([str(a) for a in args], check=True, capture_output=True)


def make_media(root: Path, clips: int, songs: int):
    """Distinct files (each its own pattern or tone), so that no cache serves a repeat."""
    lines_v, lines_a = [], []
    for i in range(clips):
        path = root / f"clip{i:03d}.mp4"
        sh("ffmpeg", "-v", "error", "-f", "lavfi", "-i",
           f"testsrc2=s=640x360:r=30:d=10,hue=h={i * 11}", "-c:v", "libx264", "-g", "30",
           "-pix_fmt", "yuv420p", "-y", path)
        lines_v.append(json.dumps({"id": f"v{i}", "video": str(path)}))
    for i in range(songs):
        path = root / f"song{i:03d}.mp3"
        sh("ffmpeg", "-v", "error", "-f", "lavfi", "-i", f"sine=f={200 + 20 * i}:r=44100:d=10",
           "-ac", "2", "-c:a", "libmp3lame", "-y", path)
        lines_a.append(json.dumps({"id": f"a{i}", "audio": str(path)}))
    (root / "video.jsonl").write_text("\n".join(lines_v) + "\n")
    (root / "audio.jsonl").write_text("\n".join(lines_a) + "\n")


def headrace_video(root: Path):
    return headrace.Pipeline(
        source={"manifest": root / "video.jsonl", "root": "/", "allow_absolute_paths": True,
                "fields": [{"name": "video", "kind": "video", "required": True}]},
        ops=[headrace.ops.video_decode(frames=FRAMES, width=SIDE, height=SIDE)],
        batch_size=8, seed=1, cpu_threads=2, memory_budget="512MiB", epochs=2)


def headrace_audio(root: Path):
    return headrace.Pipeline(
        source={"manifest": root / "audio.jsonl", "root": "/", "allow_absolute_paths": True,
                "fields": [{"name": "audio", "kind": "audio", "required": True}]},
        ops=[headrace.ops.audio_decode(channels=1, sample_rate=RATE),
             headrace.ops.audio_crop(seconds=SECONDS)],
        batch_size=16, seed=1, cpu_threads=2, memory_budget="256MiB", epochs=2)


class PyAvClips(Dataset):
    def __init__(self, paths):
        self.paths = paths

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        import av
        with av.open(str(self.paths[i])) as container:
            stream = container.streams.video[0]
            total = stream.frames
            want = set(np.linspace(0, total - 1, FRAMES).round().astype(int).tolist())
            frames = []
            for n, frame in enumerate(container.decode(stream)):
                if n in want:
                    frames.append(frame.to_ndarray(width=SIDE, height=SIDE, format="rgb24"))
                if n >= max(want):
                    break
        clip = np.stack(frames).transpose(0, 3, 1, 2)  # T, C, H, W
        return {"video": torch.from_numpy(np.ascontiguousarray(clip))}


class SoundfileSongs(Dataset):
    def __init__(self, paths):
        self.paths = paths
        self.epoch = 0

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        import soundfile
        import soxr
        data, rate = soundfile.read(str(self.paths[i]), dtype="float32", always_2d=True)
        mono = data.mean(axis=1)
        audio = soxr.resample(mono, rate, RATE)
        n = int(SECONDS * RATE)
        rng = np.random.default_rng((1, self.epoch, i))
        start = int(rng.integers(0, max(1, len(audio) - n + 1)))
        out = np.zeros((1, n), np.float32)
        window = audio[start:start + n]
        out[0, :len(window)] = window
        return {"audio": torch.from_numpy(out), "audio_length": len(window)}


def time_run(make_loader, epochs=2):
    """Seconds from creating the loader to the end of its last epoch, and the samples.
    Whole runs, start-up included on both sides: a loader that prefetches the next epoch
    during this one (Headrace does) would make a per-epoch time meaningless."""
    start = time.perf_counter()
    loader = make_loader()
    samples = 0
    for _ in range(epochs):
        for batch in loader:
            samples += next(iter(batch.values())).shape[0]
    return time.perf_counter() - start, samples


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clips", type=int, default=32)
    ap.add_argument("--songs", type=int, default=48)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="headrace-media-loaders-"))
    make_media(root, a.clips, a.songs)
    clips = sorted(root.glob("clip*.mp4"))
    songs = sorted(root.glob("song*.mp3"))

    rows = {}
    ours = time_run(lambda: headrace.torch.TorchLoader(headrace_video(root)))
    ref = time_run(lambda: DataLoader(PyAvClips(clips), batch_size=8, num_workers=2,
                                      shuffle=True, persistent_workers=True))
    rows["video"] = {"headrace_clips_per_s": ours[1] / ours[0],
                     "pyav_dataloader_clips_per_s": ref[1] / ref[0]}
    ours = time_run(lambda: headrace.torch.TorchLoader(headrace_audio(root)))
    ref = time_run(lambda: DataLoader(SoundfileSongs(songs), batch_size=16, num_workers=2,
                                      shuffle=True, persistent_workers=True))
    rows["audio"] = {"headrace_clips_per_s": ours[1] / ours[0],
                     "soundfile_soxr_dataloader_clips_per_s": ref[1] / ref[0]}

    import av
    import soundfile
    import soxr
    result = {
        "machine": f"{platform.node()} ({platform.machine()}), torch {torch.__version__}, "
                   f"av {av.__version__}, soundfile {soundfile.__version__}, "
                   f"soxr {soxr.__version__}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "clips": a.clips, "songs": a.songs, **rows,
    }
    for kind, row in rows.items():
        (ours_key, ours_v), (ref_key, ref_v) = row.items()
        row["ratio"] = ours_v / ref_v
        print(f"{kind:6s} headrace {ours_v:7.1f}/s  {ref_key.rsplit('_clips', 1)[0]} "
              f"{ref_v:7.1f}/s  ratio {row['ratio']:.2f}")
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
