"""video.decode and audio.decode against the ffmpeg command line, one thread each.

The same files, the same work: all 300 frames of a 10 s 640x360 H.264 clip (30 fps,
keyframe every second) to packed RGB at its own size, and a 30 s 44.1 kHz stereo MP3 to
16 kHz mono float. Headrace's side is `headrace bench ops` (single thread, files read
before timing, best of 3 passes) over a manifest of R records naming the file; the
reference is `ffmpeg -threads 1 ... -f rawvideo|f32le -y /dev/null`, best of 3 runs
(its process start, ~40 ms, is measured with a 1-frame run and subtracted).

    python bench/media.py [--bin build/headrace] [--records 6] [--json bench/media.json]
"""
import argparse
import json
import platform
import subprocess
import tempfile
import time
from pathlib import Path

from bench_util import bench_ops

REPO = Path(__file__).resolve().parent.parent


def sh(*args):
    subprocess.run([str(a) for a in args], check=True, capture_output=True)


def best_of(n, *args):
    best = float("inf")
    for _ in range(n):
        start = time.perf_counter()
        sh(*args)
        best = min(best, time.perf_counter() - start)
    return best



def write_case(root, name, field, kind, path, ops, records):
    (root / f"{name}.jsonl").write_text("".join(
        json.dumps({"id": f"{i:03d}", field: str(path)}) + "\n" for i in range(records)))
    (root / f"{name}.yaml").write_text(json.dumps({
        "source": {"manifest": str(root / f"{name}.jsonl"), "allow_absolute_paths": True,
                   "root": "/", "fields": [{"name": field, "kind": kind, "required": True}]},
        "ops": ops}))
    return root / f"{name}.yaml"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(REPO / "build" / "headrace"))
    ap.add_argument("--records", type=int, default=6)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="headrace-media-"))
    clip, song = root / "clip.mp4", root / "song.mp3"
    sh("ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc2=s=640x360:r=30:d=10",
       "-c:v", "libx264", "-g", "30", "-pix_fmt", "yuv420p", "-y", clip)
    sh("ffmpeg", "-v", "error", "-f", "lavfi", "-i", "sine=f=440:r=44100:d=30", "-ac", "2",
       "-c:a", "libmp3lame", "-y", song)

    video_cfg = write_case(root, "video", "video", "video", clip, [{"video.decode": {
        "frames": 300, "width": 640, "height": 360, "fps": 30, "clip_start": "start",
        "layout": "thwc"}}], a.records)
    # audio.crop (a memcpy) takes the decoded samples into the batch: a chain must end in
    # a batch field.
    audio_cfg = write_case(root, "audio", "audio", "audio", song, [
        {"audio.decode": {"sample_rate": 16000, "channels": 1}},
        {"audio.crop": {"seconds": 30, "start": "start"}}], a.records)
    ours = {**bench_ops(a.bin, video_cfg, a.records), **bench_ops(a.bin, audio_cfg, a.records)}

    start = best_of(3, "ffmpeg", "-v", "error", "-threads", "1", "-i", clip, "-frames:v", "1",
                    "-f", "rawvideo", "-pix_fmt", "rgb24", "-y", "/dev/null")
    video_cli = best_of(3, "ffmpeg", "-v", "error", "-threads", "1", "-i", clip, "-f",
                        "rawvideo", "-pix_fmt", "rgb24", "-y", "/dev/null") - start
    audio_start = best_of(3, "ffmpeg", "-v", "error", "-threads", "1", "-t", "0.01", "-i", song,
                          "-ac", "1", "-ar", "16000", "-f", "f32le", "-y", "/dev/null")
    audio_cli = best_of(3, "ffmpeg", "-v", "error", "-threads", "1", "-i", song, "-ac", "1",
                        "-ar", "16000", "-f", "f32le", "-y", "/dev/null") - audio_start
    result = {
        "machine": f"{platform.node()} ({platform.machine()})",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "video_fps": {"headrace": 300 / ours["video.decode"], "ffmpeg_cli": 300 / video_cli},
        "audio_x_realtime": {"headrace": 30 / (ours["audio.decode"] + ours["audio.crop"]),
                         "ffmpeg_cli": 30 / audio_cli},
    }
    for k in ("video_fps", "audio_x_realtime"):
        result[k]["ratio"] = result[k]["headrace"] / result[k]["ffmpeg_cli"]
        print(f"{k:18s} headrace {result[k]['headrace']:8.1f}  ffmpeg {result[k]['ffmpeg_cli']:8.1f}"
              f"  ratio {result[k]['ratio']:.3f}")
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
