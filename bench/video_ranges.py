"""Video from object storage, read whole or in ranges (issue 31): `make bench-video-ranges`.

`video.decode {read: ranges}` reads a clip's index and then only the stretches its frames
need; `read: whole` (the default) reads every byte before the chain runs. Both go through
`headrace bench serve` (the loopback object server, every response held back by
--latency-ms of first-byte latency) over a link of --rate-mbit: as root, server and
loader run in a network namespace of their own whose loopback is shaped with tc's token
bucket (nothing of the host's network is touched; the namespace goes when the script
ends); otherwise unshaped on 127.0.0.1, which the JSON records.

Two sets of clips, testsrc2 with temporal noise (as bench/video_loaders.py's), libx264
defaults, a keyframe a second:
- kinetics: 16 clips of 640x360, 10 s, 8 frames spread over each (the issue's clips);
- long: 6 clips of 640x360, 60 s, 8 frames of a random 4 s clip of each.
Each is run `exact` and `keyframe` (seek), read whole (2 CPU threads) or in ranges (2 CPU
threads, and 4: the reads' waits are time a thread does not decode, and threads past the
cores fill it), 2 epochs per run; rounds interleaved, the order rotating; medians.
Per run: samples/s and media bytes per sample (the storage's count, the manifest less).

    python bench/video_ranges.py [--bin build/headrace] [--rounds 3] [--latency-ms 20]
        [--rate-mbit 1000] [--json bench/video_ranges.json]
"""
import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

NAMESPACE = "hr-vranges"
SETS = {
    "kinetics": {"clips": 16, "seconds": 10, "batch": 8, "clip_seconds": 0},
    "long": {"clips": 6, "seconds": 60, "batch": 4, "clip_seconds": 4},
}
VARIANTS = [("whole", 2), ("ranges", 2), ("ranges", 4)]


def sh(*args, check=True):
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(map(str, args))}` failed ({proc.returncode}): "
                           f"{proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def make_clips(root: Path, name: str, n: int, seconds: int):
    folder = root / name
    folder.mkdir(parents=True)

    def one(i):
        path = folder / f"c{i:03d}.mp4"
        sh("ffmpeg", "-v", "error", "-f", "lavfi", "-i",
           f"testsrc2=s=640x360:r=30:d={seconds},hue=h={i * 11},noise=alls=10:allf=t",
           "-c:v", "libx264", "-g", "30", "-pix_fmt", "yuv420p", "-threads", "1", "-y", path)
        return json.dumps({"id": f"{name}{i}", "video": path.name})

    with ThreadPoolExecutor(2) as pool:
        lines = list(pool.map(one, range(n)))
    (folder / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def shaped_network(rate_mbit: float):
    """A namespace whose loopback carries rate_mbit; the command prefix that runs in it.
    None when it cannot be made (not root, no netns): the caller runs unshaped."""
    if rate_mbit <= 0 or os.geteuid() != 0 or shutil.which("tc") is None:
        return None
    if subprocess.run(["ip", "netns", "list"], capture_output=True).returncode != 0:
        return None
    teardown_network()
    sh("ip", "netns", "add", NAMESPACE)
    run = ["ip", "netns", "exec", NAMESPACE]
    sh(*run, "ip", "link", "set", "lo", "up")
    # burst: at least the loopback's MTU (64 KiB) plus headroom; latency: the queue's bound.
    sh(*run, "tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", f"{rate_mbit}mbit",
       "burst", "512kb", "latency", "100ms")
    return run


def teardown_network():
    if NAMESPACE in sh("ip", "netns", "list", check=False).split():
        for pid in sh("ip", "netns", "pids", NAMESPACE, check=False).split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        sh("ip", "netns", "delete", NAMESPACE, check=False)


def serve(prefix, binary, folder, latency_ms):
    proc = subprocess.Popen([*prefix, str(binary), "bench", "serve", str(folder),
                             "--latency-ms", str(latency_ms)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("endpoint "):
        proc.kill()
        raise RuntimeError(f"headrace bench serve: {line}{proc.stderr.read()}")
    return proc, line.split()[1]


def config_text(endpoint, spec, seek, read, threads):
    clip = f", clip_seconds: {spec['clip_seconds']}" if spec["clip_seconds"] else ""
    return (f"source:\n  manifest: s3://bench/manifest.jsonl\n"
            "  fields:\n    - {name: video, kind: video, required: true}\n"
            f"storage:\n  endpoint: {endpoint}\n  anonymous: true\n"
            f"seed: 1\nepochs: 2\nbatch:\n  size: {spec['batch']}\n"
            f"ops:\n  - video.decode: {{frames: 8, width: 224, height: 224{clip}, "
            f"seek: {seek}, read: {read}}}\n"
            f"execution:\n  cpu_threads: {threads}\nmemory:\n  budget_bytes: 1GiB\n")


def run_once(prefix, binary, work: Path, endpoint, spec, seek, read, threads, manifest_bytes):
    config = work / f"{seek}-{read}-{threads}.yaml"
    config.write_text(config_text(endpoint, spec, seek, read, threads))
    report = work / f"{seek}-{read}-{threads}.json"
    sh(*prefix, binary, "run", config, "--report", report, "--quiet")
    r = json.loads(report.read_text())
    media = sum(s.get("bytes", 0) for s in r["storage"].values()) - manifest_bytes
    return {"samples_per_s": r["samples_per_s"], "media_mb_per_sample": media / 1e6 / r["samples"],
            "errors": r["errors"]["total"], "ranged_unplanned":
                r.get("ranged_reads", {}).get("unplanned", 0)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/headrace")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency-ms", type=float, default=20)
    ap.add_argument("--rate-mbit", type=float, default=1000)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    binary = Path(a.bin).resolve()
    root = Path(tempfile.mkdtemp(prefix="headrace-video-ranges-"))
    prefix = shaped_network(a.rate_mbit)
    shaped = prefix is not None
    if not shaped:
        prefix = []
        print("unshaped: 127.0.0.1 at full speed (not root, or no netns/tc)", file=sys.stderr)
    result = {}
    try:
        for name, spec in SETS.items():
            folder = make_clips(root, name, spec["clips"], spec["seconds"])
            clip_mb = sum(p.stat().st_size for p in folder.glob("*.mp4")) / 1e6 / spec["clips"]
            server, endpoint = serve(prefix, binary, folder, a.latency_ms)
            try:
                manifest_bytes = (folder / "manifest.jsonl").stat().st_size
                sides = [(seek, read, threads) for seek in ("exact", "keyframe")
                         for read, threads in VARIANTS]
                runs = {side: [] for side in sides}
                for r in range(a.rounds):
                    order = sides[r % len(sides):] + sides[:r % len(sides)]
                    for side in order:
                        got = run_once(prefix, binary, root, endpoint, spec, *side,
                                       manifest_bytes)
                        runs[side].append(got)
                        print(f"  {name} round {r} {side[0]:8s} {side[1]:6s} {side[2]} threads "
                              f"{got['samples_per_s']:7.2f} samples/s "
                              f"{got['media_mb_per_sample']:6.2f} MB/sample", flush=True)
            finally:
                server.terminate()
                server.wait(timeout=10)
            rows = {}
            for (seek, read, threads), got in runs.items():
                rows[f"{seek}/{read}/{threads}"] = {
                    "samples_per_s": statistics.median(g["samples_per_s"] for g in got),
                    "samples_per_s_rounds": [g["samples_per_s"] for g in got],
                    "media_mb_per_sample": statistics.median(g["media_mb_per_sample"] for g in got),
                    "errors": sum(g["errors"] for g in got),
                    "ranged_unplanned": sum(g["ranged_unplanned"] for g in got)}
            for seek in ("exact", "keyframe"):
                whole = rows[f"{seek}/whole/2"]
                for threads in (2, 4):
                    ranged = rows[f"{seek}/ranges/{threads}"]
                    ranged["vs_whole"] = ranged["samples_per_s"] / whole["samples_per_s"]
                    ranged["bytes_vs_whole"] = (ranged["media_mb_per_sample"] /
                                                whole["media_mb_per_sample"])
            result[name] = {**spec, "clip_mb": clip_mb, "runs": rows}
            print(f"{name}: " + "; ".join(
                f"{k} {v['samples_per_s']:.2f}/s {v['media_mb_per_sample']:.2f} MB"
                + (f" ({v['vs_whole']:.2f}x)" if "vs_whole" in v else "")
                for k, v in rows.items()), flush=True)
    finally:
        if shaped:
            teardown_network()
        shutil.rmtree(root, ignore_errors=True)
    out = {"machine": f"{platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs)",
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "latency_ms": a.latency_ms, "rate_mbit": a.rate_mbit if shaped else None,
           "shaped": shaped, "rounds": a.rounds, **result}
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
