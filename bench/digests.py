"""Batches byte-identical across two builds: every example pipeline, vqa.yaml on every
source kind (manifest parsed and as lines, tar shards, Parquet, a materialization), and
the Qwen-VL pipelines packed (window 0 and 8, resumed mid-epoch), with batch.max_tokens
(resumed too) and blended, shuffled, each run's `--digests` from the old and the new
`headrace` binary compared.

    .venv/bin/python bench/digests.py --old /tmp/headrace-before --new build/headrace
    make check-digests BEFORE=<git rev>     # builds that rev's CLI under .gl/, then this

Needs data/sample (make run) and data/multimodal (`headrace make-sample --out
data/multimodal --samples 48 --modalities all --shards`); makes data/mix and data/blend
as the examples' headers say when they are missing; writes what it derives into
out/digests/. Prints one line per run and exits 1 if any differs (a run that fails alike
on both sides is reported, not counted). For a redesign of the engine, a source or batch
forming (issues 24, 48): run it before merging, against the binary of the commit before.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "out" / "digests"


def digests(binary, config, *sets, batches=6):
    report = OUT / "report.json"
    args = [binary, "run", config, "--report", report, "--digests", "--quiet",
            "--max-batches", str(batches), "--set", "trainer.step_ms=0"]
    for s in sets:
        if s.startswith("start="):
            args += ["--start-batch", s[len("start="):]]
        else:
            args += ["--set", s]
    proc = subprocess.run([str(a) for a in args], cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        return f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"
    return json.loads(report.read_text())["batch_digests"]


def derived_sources(binary):
    """vqa.yaml's data as shards, Parquet and a materialization; returns (name, sets)."""
    sample = REPO / "data" / "sample"
    shards = OUT / "shards"
    if not (shards / "shards.json").exists():
        subprocess.run([str(binary), "shard", sample / "manifest.jsonl", "--out", shards,
                        "--target-size", "8MB"], check=True, capture_output=True)
    parquet = OUT / "parquet"
    if not parquet.exists():
        import pyarrow as pa
        import pyarrow.parquet as pq
        rows = [json.loads(line) for line in (sample / "manifest.jsonl").read_text().splitlines()]
        parquet.mkdir(parents=True)
        for f in range(4):
            part = rows[f * len(rows) // 4:(f + 1) * len(rows) // 4]
            pq.write_table(pa.table({
                "id": [r["id"] for r in part],
                "image": pa.array([(sample / r["image"]).read_bytes() for r in part],
                                  type=pa.binary()),
                "conversations": [json.dumps(r["conversations"]) for r in part],
            }), parquet / f"part-{f:05d}.parquet", row_group_size=64)
    materialized = OUT / "materialized"
    if not (materialized / "materialized.json").exists():
        subprocess.run([str(binary), "materialize", "examples/vqa.yaml", "--to", materialized,
                        "--quiet", "--set", "epochs=1"], cwd=REPO, check=True,
                       capture_output=True)
    return [
        ("vqa manifest parsed", ["source.records=parsed"]),
        ("vqa manifest lines", ["source.records=lines"]),
        ("vqa shards", [f"source.manifest=", f"source.shards={shards}/shard-*.tar"]),
        ("vqa parquet", [f"source.manifest=",
                         f"source.parquet={parquet}/part-{{00000..00003}}.parquet"]),
    ], materialized


# The packed, max_tokens and resumed runs: (name, config, sets); "start=N" is --start-batch.
PACK = ["batch.pack.seq_len=8192", "batch.pack.window=0"]
PACK_WINDOW = ["batch.pack.seq_len=8192", "batch.pack.window=8"]
MAX_TOKENS = ["batch.max_tokens=16384"]
FORMED = [
    ("qwen2_vl packed", "qwen2_vl", PACK),
    ("qwen2_vl packed window 8", "qwen2_vl", PACK_WINDOW),
    ("qwen2_vl packed window 8 from batch 3", "qwen2_vl", PACK_WINDOW + ["start=3"]),
    ("qwen2_vl max_tokens", "qwen2_vl", MAX_TOKENS),
    ("qwen2_vl max_tokens from batch 2", "qwen2_vl", MAX_TOKENS + ["start=2"]),
    ("qwen2_vl_blend packed window 8", "qwen2_vl_blend", PACK_WINDOW),
    ("qwen2_vl_blend max_tokens", "qwen2_vl_blend", MAX_TOKENS),
]


def blend_data(binary):
    """data/mix and data/blend as examples/mix.yaml and qwen2_vl_blend.yaml say."""
    for out, args in [("data/mix/chat", ["--samples", "120"]),
                      ("data/mix/docs", ["--samples", "60", "--seed", "7", "--shards"]),
                      ("data/mix/text", ["--samples", "80", "--seed", "9"]),
                      ("data/blend/pictures", ["--samples", "80"]),
                      ("data/blend/clips", ["--samples", "20", "--modalities", "video"])]:
        if not (REPO / out / "manifest.jsonl").exists():
            subprocess.run([str(binary), "make-sample", "--out", REPO / out, *args], check=True,
                           capture_output=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--old", required=True)
    parser.add_argument("--new", required=True)
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    blend_data(args.new)
    runs = []
    for example in sorted((REPO / "examples").glob("*.yaml")):
        if example.name in ("vqa_bpe.yaml",) and not (REPO / "data/sample/hf").exists():
            continue
        data = "data/multimodal" if "multimodal" in example.read_text() else "data/sample"
        if not (REPO / data / "manifest.jsonl").exists():
            continue
        runs.append((example.stem, f"examples/{example.name}", []))
    sources, materialized = derived_sources(args.new)
    runs += [(name, "examples/vqa.yaml", sets) for name, sets in sources]
    mat_config = OUT / "materialized.yaml"
    mat_config.write_text(f"source: {{materialized: {materialized}}}\nbatch: {{size: 32}}\n"
                          "epochs: 1\n")
    runs.append(("vqa materialized", mat_config, []))
    runs += [(name, f"examples/{example}.yaml", sets + ["epochs=2"])
             for name, example, sets in FORMED]
    failed = 0
    for name, config, sets in runs:
        old = digests(args.old, config, *sets, batches=12)
        new = digests(args.new, config, *sets, batches=12)
        if isinstance(old, str) and old == new:
            print(f"both fail  {name}: {new}")
            continue
        same = old == new and isinstance(new, list)
        failed += 0 if same else 1
        detail = f"{len(new)} batches" if isinstance(new, list) else new
        print(f"{'same' if same else 'DIFFERENT'}  {name}: {detail}"
              + ("" if same else f" (old: {old if isinstance(old, str) else len(old)})"))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
