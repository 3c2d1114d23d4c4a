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
    return headrace.Pipeline.from_yaml(path)


def first_batch_after_reposition(loader, epoch):
    start = time.perf_counter()
    loader.set_epoch(epoch)
    next(iter(loader))
    return time.perf_counter() - start


def reload_first_batch(spec, epoch):
    start = time.perf_counter()
    impl = _headrace._Loader.make(spec, 0, 1, epoch, 0, False)
    impl.next()
    elapsed = time.perf_counter() - start
    impl.close()
    return elapsed


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
        for r in range(args.repeats):
            epoch = 1 + r % 3
            prepared.append(first_batch_after_reposition(loader, epoch))
            for _ in loader:
                break
            reload.append(reload_first_batch(pipeline.spec(), epoch))
        loader.close()
        results[name] = {"prepared_ms": 1e3 * statistics.median(prepared),
                         "reload_ms": 1e3 * statistics.median(reload)}
        print(f"{name}: set_epoch after a break to the first batch: prepared "
              f"{results[name]['prepared_ms']:.1f} ms, reload {results[name]['reload_ms']:.1f} ms "
              f"({results[name]['reload_ms'] / results[name]['prepared_ms']:.2f}x)")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
