"""The cost of Python operators inside the pipeline (issue 4).

    .venv/bin/python bench/python_ops.py [--data data/sample] [--samples 256]

Same pipeline as bench/vs_dataloader.py (decode, resize 256, crop 224, normalize,
tokenize 128; batch 64, 2 CPU threads), with a per-sample Python function added:
- none:              the C++ chain alone;
- light, threads:    a numpy function (mean of the image) on the engine threads;
- gil-heavy, threads: a pure-Python loop holding the GIL (~2 ms) on the engine threads;
- gil-heavy, 2 procs: the same in 2 worker processes, image through shared memory;
- mixup, batch op:   a per-batch numpy function (mixup of the batch with its reverse,
                     in place, seeded by batch.seed) as headrace.ops.map_batch, on the
                     engine threads;
- mixup, in loop:    the same function applied by the iterating loop to each batch it
                     gets (what map_batch did before it ran inside the engine).
The function's time per batch is the engine's own measurement (loader.report()["ops"]),
or, in the loop, the loop's.
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


def mixup(batch):
    rng = np.random.default_rng(batch.seed)
    lam = np.float32(rng.beta(0.4, 0.4))
    image = batch["image"]
    flipped = image[::-1].copy()
    image *= lam
    image += (1 - lam) * flipped


def run(data, samples, extra, batch_ops=(), in_loop=None):
    ops = headrace.ops
    manifest = data / "manifest.jsonl"
    sub = Path(os.environ.get("TMPDIR", "/tmp")) / f"hr-ops-{samples}.jsonl"
    sub.write_text("".join(open(manifest).readlines()[:samples]))
    pipeline = headrace.Pipeline(
        source={"manifest": str(sub), "root": str(data)},
        ops=[ops.decode(), ops.resize(shorter_side=256), ops.center_crop(224), *extra,
             ops.normalize(), ops.tokenize(data / "tokenizer.model", max_length=128)],
        batch_size=64, seed=0, epochs=1, cpu_threads=2)
    for fn in batch_ops:
        pipeline = pipeline.map_batch(fn)
    t0 = time.perf_counter()
    loader = headrace.Loader(pipeline)
    it = iter(loader)
    n = 0
    in_loop_s = 0.0
    batches = len(loader)
    for _ in range(batches):  # not to exhaustion: the engine stays up for report()
        b = next(it)
        if in_loop is not None:
            start = time.perf_counter()
            in_loop(headrace.Batch({k: np.asarray(v) for k, v in b.items()}, b.epoch, b.index,
                                   seed=b.index))
            in_loop_s += time.perf_counter() - start
        n += b["index"].shape[0]
    sps = n / (time.perf_counter() - t0)
    python_s = sum(op["busy_s"] for op in loader.report()["ops"]
                   if op["name"].startswith("python."))
    loader.close()
    return sps, (python_s + in_loop_s) * 1e3 / batches


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="data/sample")
    ap.add_argument("--samples", type=int, default=256)
    args = ap.parse_args()
    data = Path(args.data)
    base, _ = run(data, args.samples, [])
    rows = [("none", (base, 0.0)),
            ("light, threads", run(data, args.samples, [headrace.ops.map(light, OUT)])),
            ("gil-heavy, threads", run(data, args.samples, [headrace.ops.map(gil_heavy, OUT)])),
            ("gil-heavy, 2 procs",
             run(data, args.samples, [headrace.ops.map(gil_heavy, OUT, processes=2)])),
            ("mixup, batch op", run(data, args.samples, [], batch_ops=[mixup])),
            ("mixup, in loop", run(data, args.samples, [], in_loop=mixup))]
    for name, (sps, op_ms) in rows:
        extra_us = (1 / sps - 1 / base) * 1e6 * 2  # per sample, per thread (2 threads)
        print(f"{name:>20}: {sps:7.1f} samples/s  (+{extra_us:7.0f} µs per sample per thread; "
              f"the Python function: {op_ms:6.1f} ms per batch)")


if __name__ == "__main__":
    main()
