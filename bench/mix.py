"""What a blend costs: the same samples as one source and as a blend of three (source.mix).

One generated dataset (make-sample) is cut into three manifests of a third each; the same
pipeline (examples/vqa.yaml's ops, trainer step 0) runs over the whole manifest and over
the blend of the three (weights 1/3 each, until: all_exhausted: every sample of each read
once, the same count). The two sides alternate, `--rounds` times each, and the medians of
samples/s are compared as a ratio (the goal: a blend costs <= 3%).

    python bench/mix.py [--samples 1200] [--size 640x480] [--epochs 3] [--rounds 5]
                        [--json bench/mix.json]
"""
import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

OPS = """ops:
  - image.decode: {}
  - image.resize: {shorter_side: 256}
  - image.center_crop: {size: 224}
  - image.normalize: {}
  - text.tokenize: {model: %s, max_length: 128}
"""


def run(binary, *args):
    proc = subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"headrace {' '.join(map(str, args))} exited {proc.returncode}\n{proc.stderr}")
    return proc


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin", default=str(REPO / "build" / "headrace"))
    p.add_argument("--samples", type=int, default=1200)
    p.add_argument("--size", default="640x480")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--cpu-threads", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="hr_mix_bench") as tmp:
        root = Path(tmp)
        run(a.bin, "make-sample", "--out", root, "--samples", a.samples, "--size", a.size)
        lines = (root / "manifest.jsonl").read_text().splitlines()
        third = -(-len(lines) // 3)
        for k in range(3):
            (root / f"part{k}.jsonl").write_text("\n".join(lines[k * third:(k + 1) * third]) + "\n")
        tail = (f"seed: 0\nepochs: {a.epochs}\nbatch: {{size: 32}}\n" + OPS % (root / "tokenizer.model") +
                f"execution: {{cpu_threads: {a.cpu_threads}}}\ntrainer: {{step_ms: 0}}\n")
        one = root / "one.yaml"
        one.write_text(f"source: {{manifest: {root / 'manifest.jsonl'}}}\n" + tail)
        mix = root / "mix.yaml"
        entries = "".join(f"    - {{name: part{k}, manifest: {root / f'part{k}.jsonl'}}}\n"
                          for k in range(3))
        mix.write_text(f"source:\n  mix:\n{entries}  until: all_exhausted\n" + tail)
        results = {"one": [], "mix": []}
        samples = {}
        for r in range(a.rounds):
            for side, config in (("one", one), ("mix", mix)) if r % 2 == 0 else \
                    (("mix", mix), ("one", one)):
                report = root / f"{side}.json"
                run(a.bin, "run", config, "--report", report, "--quiet")
                rep = json.loads(report.read_text())
                results[side].append(rep["samples_per_s"])
                samples[side] = rep["samples"]
    med = {k: statistics.median(v) for k, v in results.items()}
    out = {
        "command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores",
        "samples": samples, "rounds": a.rounds, "samples_per_s": results,
        "median_samples_per_s": med, "mix_over_one": med["mix"] / med["one"],
    }
    print(f"one source {med['one']:.1f} samples/s, blend of three {med['mix']:.1f} "
          f"(x{out['mix_over_one']:.3f}); samples {samples}; rounds {a.rounds}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
