"""One rank's samples/s with batch.balance off, on, and on with a size index (issue 49):
rank 0 of 8 over a VLM mix (examples/qwen2_vl.yaml's chain), the sides interleaved,
medians of the rounds. Balanced without an index, every rank sizes its whole step (8 x its
own samples: media read, the size pass run, nothing decoded) before taking its share; with
one (`headrace index sizes`), it reads each sample's entry.

    .venv/bin/python bench/balance_rank.py --data data/vlm [--index PATH] [--rounds 3]
        [--batches 24]
"""
import argparse
import statistics
import time

import headrace


def rate(data: str, balance: bool, batches: int, index: str = "") -> float:
    overrides = [f"source.manifest={data}/manifest.jsonl", "epochs=1", "execution.cpu_threads=2"]
    if balance:
        overrides.append("batch.balance.cost=qwen2_vl")
    if index:
        overrides.append(f"batch.balance.index={index}")
    pipeline = headrace.Pipeline.from_yaml("examples/qwen2_vl.yaml", overrides=overrides)
    with headrace.Loader(pipeline, rank=0, world_size=8) as loader:
        it = iter(loader)
        next(it)  # the first batch: start-up, not the rate
        start, samples = time.perf_counter(), 0
        for _ in range(batches):
            samples += len(next(it)["index"])
        return samples / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="data/vlm")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=24)
    parser.add_argument("--index", default="", help="a size index of --data (a third side)")
    args = parser.parse_args()
    sides = {"off": (False, ""), "on": (True, "")}
    if args.index:
        sides["on, index"] = (True, args.index)
    rates = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, (balance, index) in sides.items():
            rates[name].append(rate(args.data, balance, args.batches, index))
    off = statistics.median(rates["off"])
    print(f"rank 0 of 8, {args.batches} batches, samples/s: " + "; ".join(
        f"{name} {[round(x, 1) for x in r]} (median {statistics.median(r) / off:.3f}x off)"
        for name, r in rates.items()))


if __name__ == "__main__":
    main()
