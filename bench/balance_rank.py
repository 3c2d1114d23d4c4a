"""One rank's samples/s with batch.balance on and off (issue 49): rank 0 of 8 over a VLM
mix (examples/qwen2_vl.yaml's chain), the two sides interleaved, medians of the rounds.
With balance, every rank sizes its whole step (8 x its own samples: headers read, the
size pass run, nothing decoded) before computing its share.

    .venv/bin/python bench/balance_rank.py --data data/vlm [--rounds 3] [--batches 24]
"""
import argparse
import statistics
import time

import headrace


def rate(data: str, balance: bool, batches: int) -> float:
    overrides = [f"source.manifest={data}/manifest.jsonl", "epochs=1", "execution.cpu_threads=2"]
    if balance:
        overrides.append("batch.balance.cost=qwen2_vl")
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
    args = parser.parse_args()
    off, on = [], []
    for _ in range(args.rounds):
        off.append(rate(args.data, False, args.batches))
        on.append(rate(args.data, True, args.batches))
    print(f"rank 0 of 8, {args.batches} batches, samples/s: off {[round(x, 1) for x in off]}, "
          f"on {[round(x, 1) for x in on]}; median on/off "
          f"{statistics.median(on) / statistics.median(off):.3f}")


if __name__ == "__main__":
    main()
