"""What an elastic resume costs against a normal one (issue 28): a state taken by W ranks
at batch k of an epoch, resumed by a rank of the same run (its own state) and by a rank of
a run with W' ranks (the global state of merge_state_dicts), timed from load_state_dict to
the first batch, at positions early, midway and late in the epoch. Neither replays the
epoch up to the position (the engine starts its order there), so both stay flat in k;
a "replay" side (a fresh loader that runs the epoch up to the position and takes the next
batch) shows what replaying would cost. Interleaved, medians.

    .venv/bin/python bench/elastic.py --data data/sample [--rounds 5] [--json bench/elastic.json]
"""
import argparse
import json
import statistics
import time
from pathlib import Path

import headrace

W, W_PRIME, BATCH = 4, 3, 16


def pipeline(data: Path) -> headrace.Pipeline:
    ops = headrace.ops
    return headrace.Pipeline(
        data / "manifest.jsonl",
        ops=[ops.decode(), ops.resize(shorter_side=256), ops.center_crop(224), ops.normalize(),
             ops.tokenize(data / "tokenizer.model", max_length=128)],
        batch_size=BATCH, epochs=2, cpu_threads=2, seed=1)


def states_at(p, k):
    """Every rank's state after k batches of epoch 0."""
    out = []
    for rank in range(W):
        loader = headrace.Loader(p, rank=rank, world_size=W)
        it = iter(loader)
        for _ in range(k):
            next(it)
        out.append(loader.state_dict())
        loader.close()
    return out


def resume_s(p, state, world):
    loader = headrace.Loader(p, rank=0, world_size=world)
    start = time.perf_counter()
    loader.load_state_dict(state)
    next(iter(loader))
    elapsed = time.perf_counter() - start
    loader.close()
    return elapsed


def replay_s(p, k):
    loader = headrace.Loader(p, rank=0, world_size=W)
    start = time.perf_counter()
    it = iter(loader)
    for _ in range(k + 1):
        next(it)
    elapsed = time.perf_counter() - start
    loader.close()
    return elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, default=Path("data/sample"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    p = pipeline(args.data)
    per_epoch = len(headrace.Loader(p, rank=0, world_size=W))
    positions = [1, per_epoch // 2, per_epoch - 2]
    states = {k: states_at(p, k) for k in positions}
    merged = {k: headrace.merge_state_dicts(states[k]) for k in positions}
    times = {(side, k): [] for side in ("normal", "elastic", "replay") for k in positions}
    for _ in range(args.rounds):
        for k in positions:  # the sides interleaved within each round
            times[("normal", k)].append(resume_s(p, states[k][0], W))
            times[("elastic", k)].append(resume_s(p, merged[k], W_PRIME))
            times[("replay", k)].append(replay_s(p, k))
    result = {"ranks": [W, W_PRIME], "batch": BATCH, "batches_per_rank_epoch": per_epoch,
              "rounds": args.rounds, "median_s": {}, "all_s": {}}
    print(f"{W} ranks -> {W_PRIME}, batch {BATCH}, {per_epoch} batches a rank an epoch; "
          f"seconds from load_state_dict to the first batch (medians of {args.rounds})")
    print(f"  {'at batch':>9} {'normal':>8} {'elastic':>8} {'replay':>8}  elastic/normal")
    for k in positions:
        med = {side: statistics.median(times[(side, k)]) for side in ("normal", "elastic", "replay")}
        result["median_s"][str(k)] = med
        result["all_s"][str(k)] = {side: times[(side, k)] for side in ("normal", "elastic", "replay")}
        print(f"  {k:>9} {med['normal']:8.3f} {med['elastic']:8.3f} {med['replay']:8.3f}  "
              f"{med['elastic'] / med['normal']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
