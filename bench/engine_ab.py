"""`headrace bench engine` on every example pipeline, two binaries side by side: the old
and the new run alternately (old, new, old, new, ...), `--runs` times each, and the
medians of each side's engine rate and efficiency (the rate over the ideal from the
operators' own single-thread cost in the same run) are compared as new / old ratios, at
one and two CPU threads.

    .venv/bin/python bench/engine_ab.py --old /tmp/headrace-before --new build/headrace

Needs data/sample and data/multimodal (bench/digests.py says how). Make sure nothing
else runs on the machine (a build halves a result).
"""
import argparse
import json
import statistics
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# pipeline -> samples timed (data/multimodal has few); `bench engine` times a manifest's
# samples, so video_vqa_shards (tar shards) is not among them.
EXAMPLES = {
    "vqa": 300, "augment": 300, "video": 48, "video_vqa": 48,
    "audio": 48, "audio_mel": 48, "asr": 48, "ocr": 48, "pointcloud": 48,
}


def bench(binary, example, samples):
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "engine.json"
        subprocess.run([binary, "bench", "engine", f"examples/{example}.yaml", "--samples",
                        str(samples), "--report", str(report)], cwd=REPO, check=True,
                       capture_output=True)
        return {o["threads"]: o for o in json.loads(report.read_text())["overhead"]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--old", required=True)
    parser.add_argument("--new", required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    out = REPO / "bench" / "engine_ab.json"
    rows = json.loads(out.read_text()) if args.only and out.exists() else []
    rows = [r for r in rows if not args.only or r["pipeline"] not in args.only]
    for example, samples in EXAMPLES.items():
        if args.only and example not in args.only:
            continue
        runs = {"old": [], "new": []}
        for _ in range(args.runs):
            for side in ("old", "new"):
                runs[side].append(bench(getattr(args, side), example, samples))
        row = {"pipeline": example}
        for threads in (1, 2):
            for key in ("samples_per_s", "efficiency"):
                med = {side: statistics.median(r[threads][key] for r in runs[side])
                       for side in runs}
                row[f"{key}_T{threads}"] = med
                row[f"{key}_T{threads}_ratio"] = med["new"] / med["old"]
        rows.append(row)
        out.write_text(json.dumps(rows, indent=1) + "\n")
        print(f"{example:18s} T=1: {row['samples_per_s_T1']['old']:8.1f} -> "
              f"{row['samples_per_s_T1']['new']:8.1f} samples/s ({row['samples_per_s_T1_ratio']:.3f}x),"
              f" eff {row['efficiency_T1']['old']:.3f} -> {row['efficiency_T1']['new']:.3f} | "
              f"T=2: {row['samples_per_s_T2']['old']:8.1f} -> {row['samples_per_s_T2']['new']:8.1f} "
              f"({row['samples_per_s_T2_ratio']:.3f}x), eff {row['efficiency_T2']['old']:.3f} -> "
              f"{row['efficiency_T2']['new']:.3f}", flush=True)


if __name__ == "__main__":
    main()
