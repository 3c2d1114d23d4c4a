"""What a reposition costs: `set_epoch` to another epoch after a `break`, on a Parquet and a
tar shard source, timed to the first batch of the new epoch. "prepared" is the Python
Loader as it is (the pipeline prepared once, a new engine per reposition); "reload" is
what it did before the prepared pipeline: every reposition built the C++ loader from the
spec again (`_headrace._Loader.make`: shard indexes or Parquet footers read, the
tokenizer loaded, the plan built). Interleaved, medians.

    .venv/bin/python bench/reposition.py [--repeats 7]

Uses out/digests/{shards,parquet} (bench/digests.py makes them from data/sample).
"""
import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import headrace
from headrace import _headrace

REPO = Path(__file__).resolve().parent.parent
DERIVED = REPO / "out" / "digests"


def pipeline_for(source_yaml: str) -> headrace.Pipeline:
    text = (REPO / "examples" / "vqa.yaml").read_text()
    text = text.replace("  manifest: data/sample/manifest.jsonl", source_yaml)
    path = Path(tempfile.mkdtemp()) / "p.yaml"
    path.write_text(text)
    return headrace.Pipeline.from_yaml(path, overrides={"epochs": 8})


def first_batch_after_reposition(loader, epoch):
    start = time.perf_counter()
    loader.set_epoch(epoch)
    next(iter(loader))
    return time.perf_counter() - start


def reload_first_batch(spec, previous, epoch):
    """As the Loader repositions: the running engine (left after a `break`) is closed, a
    new one is made, and its first batch taken; here the new one is built from the spec."""
    start = time.perf_counter()
    previous.close()
    impl = _headrace._Loader.make(spec, 0, 1, epoch, 0, False)
    impl.next()
    return time.perf_counter() - start, impl


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    sources = {
        "parquet": f"  parquet: \"{DERIVED}/parquet/part-{{00000..00003}}.parquet\"",
        "shards": f"  shards: \"{DERIVED}/shards/shard-*.tar\"",
    }
    results = {}
    for name, yaml in sources.items():
        pipeline = pipeline_for(yaml)
        loader = headrace.Loader(pipeline)
        for _ in loader:  # epoch 0's first batch, then a break
            break
        prepared, reload = [], []
        running = _headrace._Loader.make(pipeline.spec(), 0, 1, 0, 0, False)
        running.next()  # the reload side's epoch 0, left after its first batch
        for r in range(args.repeats):
            epoch = 1 + r % 3
            prepared.append(first_batch_after_reposition(loader, epoch))
            for _ in loader:
                break
            seconds, running = reload_first_batch(pipeline.spec(), running, epoch)
            reload.append(seconds)
        running.close()
        loader.close()
        # The part a reload repeats and a prepared pipeline does once: opening the source
        # (index, footers), loading the tokenizer, planning; against starting a run of it.
        prepare, start = [], []
        for _ in range(args.repeats):
            t = time.perf_counter()
            made = _headrace._Prepared.make(pipeline.spec())
            prepare.append(time.perf_counter() - t)
            t = time.perf_counter()
            made.run(0, 1, 1, 0).close()
            start.append(time.perf_counter() - t)
        results[name] = {"prepared_ms": 1e3 * statistics.median(prepared),
                         "reload_ms": 1e3 * statistics.median(reload),
                         "prepare_ms": 1e3 * statistics.median(prepare),
                         "run_start_ms": 1e3 * statistics.median(start)}
        print(f"{name}: prepare (source opened, tokenizer loaded, plan) "
              f"{results[name]['prepare_ms']:.1f} ms, a run's start and stop "
              f"{results[name]['run_start_ms']:.1f} ms")
        print(f"{name}: set_epoch after a break to the first batch: prepared "
              f"{results[name]['prepared_ms']:.1f} ms, reload {results[name]['reload_ms']:.1f} ms "
              f"({results[name]['reload_ms'] / results[name]['prepared_ms']:.2f}x)")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
