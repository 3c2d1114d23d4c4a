#!/usr/bin/env python3
"""Batches byte for byte, before and after a change: every example pipeline run by two
headrace binaries over the same generated data, their batch digests compared.

    scripts/compare_digests.py BEFORE_BIN AFTER_BIN [--work DIR]
    make check-digests BEFORE=<git rev>     # builds that rev's binary in .gl/, then this

The runs: each example over make-sample data (a manifest, tar shards, a blend of
manifests and shards, a blend with per-entry ops), unpacked, packed (window 0 and 8, and
resumed mid-epoch), and with batch.max_tokens. Prints one line per run and exits 1 if any
run's digests differ (or a run fails on one side only).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# The examples, each with the data folder it reads data/sample from (make-sample's
# arguments) and the variations run on it, each a list of --set overrides (and "start=N"
# for --start-batch N).
PACK = ["batch.pack.seq_len=8192", "batch.pack.window=0"]
PACK_WINDOW = ["batch.pack.seq_len=8192", "batch.pack.window=8"]
MAX_TOKENS = ["batch.max_tokens=16384"]
SAMPLE = {
    "plain": ["--samples", 96],
    "vlm": ["--samples", 96, "--mix", "vlm"],
    "video": ["--samples", 24, "--modalities", "video"],
}
RUNS = [
    ("vqa", "plain", [[]]),
    ("augment", "plain", [[]]),
    ("mix", "plain", [[]]),
    ("video_vqa", "plain", [[]]),
    ("video_vqa_shards", "plain", [[]]),
    ("audio", "plain", [[]]),
    ("pointcloud", "plain", [[]]),
    ("qwen2_vl", "vlm", [[], PACK, PACK_WINDOW, PACK_WINDOW + ["start=3"], MAX_TOKENS,
                         MAX_TOKENS + ["start=2"]]),
    ("qwen2_vl_blend", "plain", [[], PACK_WINDOW, MAX_TOKENS]),
    ("qwen2_vl_video", "video", [[], PACK]),
]
COMMON = ["shuffle=true", "epochs=2", "execution.cpu_threads=2"]


def make_data(binary, work):
    """The folders the examples read, relative to work/<kind> for each kind of
    data/sample (the others shared)."""
    def sample(out, *args):
        if not (out / "manifest.jsonl").exists():
            subprocess.run([binary, "make-sample", "--out", out, *map(str, args)],
                           check=True, capture_output=True)
    shared = work / "shared"
    sample(shared / "multimodal", "--samples", 24, "--seed", 2, "--modalities", "all",
           "--shards")
    sample(shared / "mix" / "chat", "--samples", 60)
    sample(shared / "mix" / "docs", "--samples", 30, "--seed", 7, "--shards")
    sample(shared / "mix" / "text", "--samples", 40, "--seed", 9)
    sample(shared / "blend" / "pictures", "--samples", 48)
    sample(shared / "blend" / "clips", "--samples", 16, "--modalities", "video")
    for kind, args in SAMPLE.items():
        data = work / kind / "data"
        sample(data / "sample", *args)
        for name, target in [("multimodal", shared / "multimodal"), ("mix", shared / "mix"),
                             ("blend", shared / "blend"), ("vocabs", REPO / "data" / "vocabs")]:
            if not (data / name).exists():
                (data / name).symlink_to(target)


def digests(binary, work, example, sets):
    report = work / "report.json"
    args = [binary, "run", REPO / "examples" / f"{example}.yaml", "--quiet", "--digests",
            "--report", report]
    for s in COMMON + sets:
        if s.startswith("start="):
            args += ["--start-batch", s[len("start="):]]
        else:
            args += ["--set", s]
    proc = subprocess.run(list(map(str, args)), cwd=work, capture_output=True, text=True,
                          timeout=900)
    if proc.returncode != 0:
        return None, proc.stderr.strip().splitlines()[-1:] or ["failed"]
    with open(report) as f:
        return json.load(f)["batch_digests"], None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--work", help="the data folder (default: a temporary one)")
    a = ap.parse_args()
    work = Path(a.work or tempfile.mkdtemp(prefix="digests."))
    work.mkdir(parents=True, exist_ok=True)
    make_data(os.path.abspath(a.after), work)
    differ = 0
    for example, kind, variations in RUNS:
        for sets in variations:
            name = f"{example} {' '.join(sets) or '(as written)'}"
            before, b_err = digests(os.path.abspath(a.before), work / kind, example, sets)
            after, a_err = digests(os.path.abspath(a.after), work / kind, example, sets)
            if before is None and after is None:
                print(f"both fail  {name}: {a_err[0]}")
                continue
            same = before == after
            differ += not same
            batches = len(after or before or [])
            print(f"{'same' if same else 'DIFFER':10} {name}: {batches} batches"
                  + (f" (before: {b_err}, after: {a_err})" if not same else ""))
    print(f"{differ} runs differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
