"""The cost of Python operators inside the pipeline (issue 4).

    .venv/bin/python bench/python_ops.py [--data data/sample] [--samples 256]

Same pipeline as bench/vs_dataloader.py (decode, resize 256, crop 224, normalize,
tokenize 128; batch 64, 2 CPU threads), with a per-sample Python function added:
- none:              the C++ chain alone;
- light, threads:    a numpy function (mean of the image) on the engine threads;
- gil-heavy, threads: a pure-Python loop holding the GIL (~2 ms) on the engine threads;
- gil-heavy, 2 procs: the same in 2 worker processes, image through shared memory.
"""
import argparse
import os
import time
from pathlib import Path

import numpy as np

import headrace

OUT = {"feature": ("f32", [3])}


def light(sample):
    return {"feature": sample["image"][::8, ::8].mean(axis=(0, 1))}


def gil_heavy(sample):
    acc = 0
    for i in range(40_000):  # pure Python: holds the GIL
        acc += i * i % 7
    return {"feature": np.full(3, acc % 255, np.float32)}


def run(data, samples, extra):
    ops = headrace.ops
    manifest = data / "manifest.jsonl"
    sub = Path(os.environ.get("TMPDIR", "/tmp")) / f"hr-ops-{samples}.jsonl"
    sub.write_text("".join(open(manifest).readlines()[:samples]))
    pipeline = headrace.Pipeline(
        source={"manifest": str(sub), "root": str(data)},
        ops=[ops.decode(), ops.resize(shorter_side=256), ops.center_crop(224), *extra,
             ops.normalize(), ops.tokenize(data / "tokenizer.model", max_length=128)],
        batch_size=64, seed=0, cpu_threads=2)
    t0 = time.perf_counter()
    n = sum(np.asarray(b["index"]).shape[0] for b in headrace.Loader(pipeline))
    return n / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="data/sample")
    ap.add_argument("--samples", type=int, default=256)
    args = ap.parse_args()
    data = Path(args.data)
    base = run(data, args.samples, [])
    rows = [("none", base),
            ("light, threads", run(data, args.samples, [headrace.ops.map(light, OUT)])),
            ("gil-heavy, threads", run(data, args.samples, [headrace.ops.map(gil_heavy, OUT)])),
            ("gil-heavy, 2 procs",
             run(data, args.samples, [headrace.ops.map(gil_heavy, OUT, processes=2)]))]
    for name, sps in rows:
        extra_us = (1 / sps - 1 / base) * 1e6 * 2  # per sample, per thread (2 threads)
        print(f"{name:>20}: {sps:7.1f} samples/s  (+{extra_us:7.0f} µs per sample per thread)")


if __name__ == "__main__":
    main()
