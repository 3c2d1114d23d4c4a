"""`make bench-manifest`: what a process holds for a large JSONL manifest, parsed vs kept
as lines (source.records), and what the per-sample parse costs.

Writes an N-record LLaVA manifest (default 1,000,000 records, ~300 bytes a line: ids,
image paths, two-turn conversations of varied length), then, each in a fresh process and
interleaved over --runs rounds, starts a headrace.Loader over it with a text-only pipeline
(text.tokenize, no media read: the cheapest chain, where a parse per sample weighs most)
and records
- load: seconds from Loader() to the first batch (the manifest read and indexed/parsed);
- heap: RssAnon growth over the process before the Loader (what each worker pays alone),
  and the report's memory.manifest_bytes / manifest_mapped_bytes; plus RssFile (the
  mapped manifest, shared in the page cache by every process that maps it);
- samples/s over --samples samples of steady state, batch 256, 1 CPU thread.
The permutation (4 bytes a sample) is in both forms' heap.

    .venv/bin/python bench/manifest_records.py [--records N] [--runs 3] [--json F]
"""
import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import json, sys, time
import headrace

def rss():
    out = {}
    for line in open("/proc/self/status"):
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile"):
            out[key] = int(value.split()[0]) * 1024
    return out

manifest, tokenizer, form, samples = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
pipeline = headrace.Pipeline(
    source={"manifest": manifest, "records": form},
    ops=[headrace.ops.tokenize(tokenizer, max_length=64)],
    batch_size=256, seed=1, cpu_threads=1, epochs=None)
before = rss()
t0 = time.perf_counter()
loader = headrace.Loader(pipeline)
it = iter(loader)
next(it)
load_s = time.perf_counter() - t0
after = rss()
memory = loader.report()["memory"]
n, t1 = 0, time.perf_counter()
while n < samples:
    n += len(next(it)["index"])
rate = n / (time.perf_counter() - t1)
loader.close()
print(json.dumps({"load_s": load_s, "heap_bytes": after["RssAnon"] - before["RssAnon"],
                  "file_bytes": after["RssFile"] - before["RssFile"],
                  "manifest_bytes": memory["manifest_bytes"],
                  "manifest_mapped_bytes": memory["manifest_mapped_bytes"],
                  "samples_per_s": rate}))
"""


def write_manifest(path, records, seed=7):
    rng = random.Random(seed)
    words = ("what is the color of the object near the left edge of this picture and why "
             "does it look that way under the light of a late afternoon").split()
    with open(path, "w") as f:
        for i in range(records):
            q = " ".join(rng.choice(words) for _ in range(rng.randint(6, 16)))
            a = " ".join(rng.choice(words) for _ in range(rng.randint(4, 24)))
            f.write(json.dumps({"id": f"{i:09d}", "image": f"images/{i % 100000:06d}/{i:09d}.jpg",
                                "conversations": [{"from": "human", "value": "<image>\n" + q},
                                                  {"from": "gpt", "value": a}]}) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--json", default=os.path.join(REPO, "bench", "manifest_records.json"))
    args = ap.parse_args()
    import headrace
    with tempfile.TemporaryDirectory(prefix="hr-manifest-") as tmp:
        manifest = os.path.join(tmp, "manifest.jsonl")
        write_manifest(manifest, args.records)
        headrace.make_sample(os.path.join(tmp, "tok"), samples=4, seed=1, threads=1)
        tokenizer = os.path.join(tmp, "tok", "tokenizer.model")
        size = os.path.getsize(manifest)
        results = {"parsed": [], "lines": []}
        for r in range(args.runs):
            forms = ["parsed", "lines"] if r % 2 == 0 else ["lines", "parsed"]
            for form in forms:
                out = subprocess.run([sys.executable, "-c", CHILD, manifest, tokenizer, form,
                                      str(args.samples)], check=True, capture_output=True,
                                     text=True).stdout
                results[form].append(json.loads(out.strip().splitlines()[-1]))
                print(form, results[form][-1], flush=True)
    summary = {}
    for form, runs in results.items():
        summary[form] = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
    per = lambda form, key: summary[form][key] / args.records
    print(f"\n{args.records} records, {size / 1e6:.0f} MB of JSONL ({size / args.records:.0f} B a "
          f"record); medians of {args.runs} interleaved runs, load {os.getloadavg()[0]:.1f}")
    print("| form | load s | heap B/record (RssAnon) | manifest_bytes B/record | mapped B/record "
          "| samples/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for form in ("parsed", "lines"):
        s = summary[form]
        print(f"| {form} | {s['load_s']:.2f} | {per(form, 'heap_bytes'):.0f} | "
              f"{per(form, 'manifest_bytes'):.1f} | {per(form, 'manifest_mapped_bytes'):.0f} | "
              f"{s['samples_per_s']:.0f} |")
    ratio = summary["lines"]["samples_per_s"] / summary["parsed"]["samples_per_s"]
    print(f"lines / parsed samples/s: {ratio:.3f}")
    with open(args.json, "w") as f:
        json.dump({"command": " ".join(sys.argv), "machine": platform.node(),
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "records": args.records, "jsonl_bytes": size, "runs": results,
                   "median": summary, "lines_over_parsed_samples_per_s": ratio}, f, indent=1)


if __name__ == "__main__":
    main()
