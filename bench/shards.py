"""Loose files vs WebDataset tar shards vs Parquet from the 20 ms latency object server.

The same generated dataset (make-sample --shards) is served by `headrace bench serve`
(the LoopbackServer of `bench io`, every response held back by --latency-ms) as
s3://bench/...; the same pipeline (examples/vqa.yaml's ops, trainer step 0, the same
CPU threads and reads in flight) runs over its manifest (one GET per image) and over its
shards (indexes + 16 MiB ranged blocks through the block cache), over the same shards in
one global order (source.shuffle_scope: global: one ranged read per sample), and over the same
samples as Parquet files written by pyarrow (image bytes + conversations as JSON, one
ranged read and one decode per row group). Prints and writes samples/s, requests per
sample and memory side by side, with ratios to the loose files.

    python bench/shards.py [--samples 2000] [--size 640x480] [--latency-ms 20]
                           [--cpu-threads 2] [--rows-per-group 250] [--json bench/shards.json]
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run(binary, *args, **kw):
    proc = subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        sys.exit(f"headrace {' '.join(map(str, args))} exited {proc.returncode}\n"
                 f"{proc.stdout}\n{proc.stderr}")
    return proc


def config_text(source, data, endpoint, args, epochs):
    return f"""
source: {source}
seed: 0
epochs: {epochs}
shuffle: true
batch: {{size: 32}}
ops:
  - image.decode: {{max_pixels: 89478485}}
  - image.resize: {{shorter_side: 256}}
  - image.center_crop: {{size: 224}}
  - image.normalize: {{dtype: f32, layout: chw}}
  - text.tokenize: {{model: {data / 'tokenizer.model'}, max_length: 128}}
execution: {{cpu_threads: {args.cpu_threads}, io_inflight: {args.io_inflight}}}
memory: {{budget_bytes: {args.budget}}}
trainer: {{step_ms: 0}}
storage: {{endpoint: "{endpoint}", anonymous: true, addressing_style: path}}
"""


def write_parquet(data: Path, files: int, rows_per_group: int) -> None:
    """The manifest's samples as Parquet under data/parquet/: id, image bytes and the
    conversation as JSON (a Hugging Face LLaVA-style table), in manifest order."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    out = data / "parquet"
    if (out / f"part-{files - 1:05d}.parquet").exists():
        return
    out.mkdir(parents=True, exist_ok=True)
    rows = [json.loads(line) for line in (data / "manifest.jsonl").read_text().splitlines()]
    per = -(-len(rows) // files)
    for f in range(files):
        part = rows[f * per:(f + 1) * per]
        table = pa.table({
            "id": [r["id"] for r in part],
            "image": pa.array([(data / r["image"]).read_bytes() for r in part], type=pa.binary()),
            "conversations": [json.dumps(r["conversations"]) for r in part],
        })
        pq.write_table(table, out / f"part-{f:05d}.parquet", row_group_size=rows_per_group)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", default=os.environ.get("HEADRACE_BIN", REPO / "build/headrace"))
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--size", default="640x480")
    parser.add_argument("--shard-size", type=int, default=64 * 1000 * 1000)
    parser.add_argument("--latency-ms", type=float, default=20)
    parser.add_argument("--cpu-threads", type=int, default=2)
    parser.add_argument("--io-inflight", type=int, default=64)
    parser.add_argument("--budget", default="1GiB")
    parser.add_argument("--window", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--rows-per-group", type=int, default=250)
    parser.add_argument("--parquet-files", type=int, default=4)
    parser.add_argument("--data", default=None, help="reuse a make-sample --shards folder")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench_shards."))
    data = Path(args.data) if args.data else tmp / "data"
    if not (data / "shards" / "shards.json").exists():
        run(args.bin, "make-sample", "--out", data, "--samples", args.samples, "--size",
            args.size, "--shards", "--shard-size", args.shard_size)
    shards = json.loads((data / "shards" / "shards.json").read_text())
    n = len(shards["shards"])
    write_parquet(data, args.parquet_files, args.rows_per_group)
    server = subprocess.Popen([str(args.bin), "bench", "serve", data, "--latency-ms",
                               str(args.latency_ms)], stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        if not line.startswith("endpoint "):
            sys.exit(f"bench serve said: {line!r}")
        endpoint = line.split()[1]
        sources = {
            "loose files": "{manifest: s3://bench/manifest.jsonl}",
            "tar shards": (f'{{shards: "s3://bench/shards/shard-{{000000..{n - 1:06d}}}.tar", '
                           f"shuffle_window: {args.window}}}"),
            "tar shards, global": (
                f'{{shards: "s3://bench/shards/shard-{{000000..{n - 1:06d}}}.tar", '
                f"shuffle_scope: global}}"),
            "parquet": (f'{{parquet: "s3://bench/parquet/part-{{00000..'
                        f'{args.parquet_files - 1:05d}}}.parquet", shuffle_window: {args.window}}}'),
        }
        rows = {}
        for name, source in sources.items():
            config = tmp / f"{name.replace(' ', '_')}.yaml"
            config.write_text(config_text(source, data, endpoint, args, args.epochs))
            report_path = tmp / f"{name.replace(' ', '_')}.json"
            start = time.monotonic()
            run(args.bin, "run", config, "--report", report_path, "--quiet")
            wall = time.monotonic() - start
            report = json.loads(report_path.read_text())
            requests = report["storage"]["s3"]["requests"]
            rows[name] = {
                "samples": report["samples"],
                "samples_per_s": report["samples_per_s"],
                "requests": requests,
                "requests_per_sample": requests / max(1, report["samples"]),
                "wall_s": wall,
                "peak_rss_mib": report["peak_rss_bytes"] / 2**20,
                "budget_peak_mib": report["budget_peak_bytes"] / 2**20,
                "block_cache": report.get("block_cache"),
                "row_group_cache": report.get("row_group_cache"),
                "errors": report["errors"]["total"],
                "shuffle_quality": report["shuffle"]["quality"],
            }
    finally:
        server.terminate()
        server.wait(timeout=30)

    loose, tar, parquet = rows["loose files"], rows["tar shards"], rows["parquet"]
    global_ = rows["tar shards, global"]
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores visible",
        "command": "python bench/shards.py " + " ".join(sys.argv[1:]),
        "dataset": {"samples": args.samples, "size": args.size, "shards": n,
                    "shard_bytes": args.shard_size, "window": args.window},
        "latency_ms": args.latency_ms, "cpu_threads": args.cpu_threads,
        "io_inflight": args.io_inflight, "epochs": args.epochs,
        "parquet_rows_per_group": args.rows_per_group, "parquet_files": args.parquet_files,
        "loose": loose, "shards": tar, "shards_global": global_, "parquet": parquet,
        "ratio_samples_per_s": tar["samples_per_s"] / loose["samples_per_s"],
        "ratio_requests_per_sample": tar["requests_per_sample"] / loose["requests_per_sample"],
        "parquet_ratio_samples_per_s": parquet["samples_per_s"] / loose["samples_per_s"],
        "global_ratio_samples_per_s": global_["samples_per_s"] / loose["samples_per_s"],
        "global_vs_window_samples_per_s": global_["samples_per_s"] / tar["samples_per_s"],
        "parquet_ratio_requests_per_sample":
            parquet["requests_per_sample"] / loose["requests_per_sample"],
    }
    print(f"{'':24}{'loose files':>14}{'tar shards':>14}{'tar, global':>14}{'parquet':>14}"
          f"{'shards/loose':>14}{'global/loose':>14}{'parquet/loose':>14}")
    for key, fmt in (("samples_per_s", "{:14.1f}"), ("requests_per_sample", "{:14.4f}"),
                     ("requests", "{:14d}"), ("peak_rss_mib", "{:14.1f}"),
                     ("shuffle_quality", "{:14.3f}")):
        sides = (tar, global_, parquet)
        ratios = [row[key] / loose[key] if loose[key] else float("nan") for row in sides]
        print(f"{key:24}" + fmt.format(loose[key]) + "".join(fmt.format(r[key]) for r in sides)
              + "".join(f"{r:14.3f}" for r in ratios))
    cache = tar["block_cache"] or {}
    print(f"block cache: {cache.get('block_reads')} blocks read, peak "
          f"{cache.get('peak_bytes', 0) / 2**20:.1f} of {cache.get('capacity_bytes', 0) / 2**20:.1f}"
          f" MiB")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
