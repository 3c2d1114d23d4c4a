"""ocr.text against the tesseract command line, one thread, the same pages.

Pages: `headrace make-sample --modalities ocr` (two lines of words in DejaVu Sans 32 px,
gray PNG, ~430x130). Headrace's side is `headrace bench ops` (single thread, files read
before timing, best of 3 passes; Tesseract's Init happens at plan time, outside the
timing) over image.decode -> ocr.text; pages/s counts both ops (the CLI decodes the PNG
too). The reference is `tesseract LIST.txt out --psm 3 -l eng` over a list of the same
pages (one process, one Init), best of 3, minus a run over one page (its start and Init),
with OMP_THREAD_LIMIT=1 (one thread, as ocr.text runs per engine thread); the CLI's
default (its OpenMP team of up to 4 on the LSTM) is reported beside it for reference.

    python bench/ocr.py [--bin build/headrace] [--pages 60] [--json bench/ocr.json]
"""
import argparse
import json
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path

from bench_util import bench_ops

REPO = Path(__file__).resolve().parent.parent


def best_of(n, args, env=None):
    best = float("inf")
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run([str(a) for a in args], check=True, capture_output=True, env=env)
        best = min(best, time.perf_counter() - start)
    return best



def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(REPO / "build" / "headrace"))
    ap.add_argument("--pages", type=int, default=60)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="headrace-ocr-"))
    subprocess.run([a.bin, "make-sample", "--out", str(root), "--samples", str(a.pages),
                    "--threads", "2", "--modalities", "ocr"], check=True, capture_output=True)
    config = root / "ocr.yaml"
    config.write_text(json.dumps({
        "source": {"manifest": str(root / "manifest.jsonl"),
                   "fields": [{"name": "image", "kind": "image", "key": "ocr_image",
                               "required": True}]},
        "ops": [{"image.decode": {}}, {"ocr.text": {"psm": "auto", "max_bytes": 96,
                                                        "write_turn": False}}]}))
    ours = bench_ops(a.bin, config, a.pages)
    per_page = ours["image.decode"] + ours["ocr.text"]

    pages = sorted((root / "ocr").glob("*.png"))
    (root / "all.txt").write_text("".join(f"{p}\n" for p in pages))
    (root / "one.txt").write_text(f"{pages[0]}\n")
    cli = ["tesseract", None, str(root / "out"), "--psm", "3", "-l", "eng"]
    serial = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    results = {}
    for name, env in (("tesseract_cli_1_thread", serial), ("tesseract_cli_default", None)):
        one = best_of(3, [*cli[:1], root / "one.txt", *cli[2:]], env)
        every = best_of(3, [*cli[:1], root / "all.txt", *cli[2:]], env)
        results[name] = (len(pages) - 1) / (every - one)
    result = {
        "machine": f"{platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs)",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "pages": len(pages),
        "ms_per_page": {"image.decode": ours["image.decode"] * 1e3,
                        "ocr.text": ours["ocr.text"] * 1e3},
        "pages_per_s": {"headrace": 1 / per_page, **results},
    }
    result["ratio_vs_cli_1_thread"] = 1 / per_page / results["tesseract_cli_1_thread"]
    for k, v in result["pages_per_s"].items():
        print(f"{k:24s} {v:8.2f} pages/s")
    print(f"ratio (headrace / CLI, 1 thread): {result['ratio_vs_cli_1_thread']:.3f}")
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
