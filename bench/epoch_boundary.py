"""Does the trainer stall at the start of an epoch? The wait for each epoch's first batch
against the median wait, with prefetch carried across the boundary (one engine for the
whole loop, the Loader's default) and without (the engine restarted at every epoch, as
the loader did before epochs were iterated one `for` at a time), side by side in one run.

    .venv/bin/python bench/epoch_boundary.py [--config examples/vqa.yaml] [--epochs 4]
                                             [--samples 256] [--json bench/epochs.json]

The trainer's step is 1.5x a batch's measured CPU time, so a loader that keeps up makes
it wait ~0 in steady state; what is left is the boundary.
"""
import argparse
import json
import statistics
import time

import headrace


def measure(pipeline, epochs, step_s, restart):
    loader = headrace.Loader(pipeline)
    waits = []  # (epoch, batch in epoch, seconds inside next())
    for epoch in range(epochs):
        it = iter(loader)
        k = 0
        while True:
            start = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                break
            waits.append((epoch, k, time.perf_counter() - start))
            assert batch.epoch == epoch
            k += 1
            time.sleep(step_s)  # the training step
        if restart:
            loader.close()  # the next `for` starts a new engine at the next epoch
    loader.close()
    steady = [w for e, k, w in waits if k > 0]
    firsts = [w for e, k, w in waits if k == 0 and e > 0]
    median = statistics.median(steady)
    p95 = statistics.quantiles(steady, n=20)[-1]
    return {"median_wait_ms": median * 1e3, "p95_wait_ms": p95 * 1e3,
            "max_steady_wait_ms": max(steady) * 1e3,
            "epoch_first_wait_ms": [w * 1e3 for w in firsts],
            "median_first_wait_ms": statistics.median(firsts) * 1e3,
            "max_first_over_median": max(firsts) / median if median > 0 else float("inf")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="examples/vqa.yaml")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--samples", type=int, default=256, help="samples per epoch (a prefix)")
    ap.add_argument("--json")
    args = ap.parse_args()
    base = headrace.Pipeline.from_yaml(args.config, overrides={"epochs": None})
    manifest = base.spec().manifest
    lines = open(manifest).read().splitlines()[:args.samples]
    small = manifest.replace(".jsonl", f".first{args.samples}.jsonl")
    with open(small, "w") as f:
        f.write("\n".join(lines) + "\n")
    pipeline = headrace.Pipeline.from_yaml(
        args.config, overrides={"epochs": None, "source.manifest": small})
    # A batch's CPU time: one epoch consumed as fast as possible.
    probe = headrace.Loader(pipeline)
    t0 = time.perf_counter()
    n = sum(1 for _ in probe)
    per_batch = (time.perf_counter() - t0) / n
    probe.close()
    step_s = 1.5 * per_batch
    result = {"batches_per_epoch": n, "step_ms": step_s * 1e3, "epochs": args.epochs}
    for name, restart in (("across_epochs", False), ("restart_per_epoch", True)):
        result[name] = measure(pipeline, args.epochs, step_s, restart)
        r = result[name]
        print(f"{name:18s} wait median {r['median_wait_ms']:.2f} ms, p95 {r['p95_wait_ms']:.2f}, "
              f"max {r['max_steady_wait_ms']:.2f} (batches 1..); first batch of "
              f"epochs 1..{args.epochs - 1}: "
              + ", ".join(f"{w:.2f}" for w in r["epoch_first_wait_ms"])
              + f" ms (median {r['median_first_wait_ms']:.2f}); worst / median "
              f"{r['max_first_over_median']:.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
