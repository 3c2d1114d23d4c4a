"""Headrace against transformers' Qwen2-VL processor in a PyTorch DataLoader (issue 27).

Same machine, same samples, same outputs, side by side:

- DataLoader (num_workers=2, batch --batch-size, one torch thread per worker): the
  dataset opens each sample's images with PIL (transformers' load_image: EXIF transpose,
  RGB) and calls Qwen2VLProcessor (Qwen2VLImageProcessorPil, and the torchvision image
  processor when torchvision imports) with the Qwen2-VL-7B-Instruct chat template
  (apply_chat_template) and Qwen2's tokenizer.json; the collate function concatenates
  input_ids, pixel_values and image_grid_thw as Qwen-VL trainers do (with the lengths).
- Headrace (cpu_threads=2, headrace.Loader): examples/qwen2_vl.yaml's chain on a list
  of images: image.decode, image.smart_resize (preset qwen2_vl), vision.patchify,
  text.tokenize (tokenizer.json, the same template, grid_field image_grid_thw,
  pad: false).

Both are tests/python/test_vlm_processor.py's (imported: its reference processor, its
Headrace pipeline and its per-sample split); pixel_values f32 on both sides; the same
max_pixels on both (--max-pixels, examples/qwen2_vl.yaml's 1003520: <= 1280 tokens an
image). Data: `headrace make-sample --mix vlm` (1-20 question/answer pairs, 0-4 images
of 200-2000 px a side, some videos; tools/make_sample/make_sample.h). The videos are in
the records but neither side decodes them: text.tokenize has no video placeholder (no
video_grid_thw path), so both render "<video>" as text.

Checked, not just timed: on --check samples (covering 0 to 4 images) image_grid_thw and
input_ids equal the processor's and the pixel_values are identical (asserted); on every
sample of every round, each side's token count and grids equal the other's (asserted).

Reported, medians of --rounds interleaved rounds (A B, B A, ...): samples/s and tokens/s
(text + vision tokens = input_ids, whose <|image_pad|> are the vision tokens) for the
whole pass (start-up included) and steady (after the first batch), and the ratios. And,
from the ragged lengths: padding tokens per 1,000 real tokens if each batch were padded
to its longest sample (padding = B * max_len - sum(len)).

    .venv/bin/python bench/vlm_processor.py [--data data/vlm] [--samples 128] [--rounds 3]
        [--batch-size 8] [--check 5] [--json bench/vlm_processor.json]

`make bench-vlm` makes data/vlm (VLM_SAMPLES records) and runs this. The default run is
short (< 5 minutes on 2 cores); --samples and --rounds for a larger one.
"""
import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one thread per worker, as torch's

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

import headrace  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))
import test_vlm_processor as vlm  # noqa: E402  (the reference and the pipeline, shared)

MAX_PIXELS = 1003520  # examples/qwen2_vl.yaml's image.smart_resize.max_pixels
MAX_LENGTH = 32768    # no sample is cut (a cut would show as unequal token counts)
WORKERS = 2


# --- the DataLoader side --------------------------------------------------------------

class Qwen2VlDataset(Dataset):
    """One manifest record -> PIL images + Qwen2VLProcessor (the test's `reference`)."""

    def __init__(self, root: Path, records: list, processor):
        self.root, self.records, self.processor = root, records, processor

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        out, _ = vlm.reference(self.processor, self.root, self.records[i])
        return {"id": self.records[i]["id"], "input_ids": out["input_ids"][0],
                "pixel_values": out.get("pixel_values"),
                "image_grid_thw": out.get("image_grid_thw")}


def collate(items):
    """Ragged, as Headrace's batch: tokens and patches concatenated, with lengths."""
    ids = [x["input_ids"] for x in items]
    pixels = [x["pixel_values"] for x in items if x["pixel_values"] is not None]
    grids = [x["image_grid_thw"] for x in items if x["image_grid_thw"] is not None]
    return {
        "id": [x["id"] for x in items],
        "input_ids": torch.from_numpy(np.concatenate(ids)),
        "input_ids_lengths": torch.tensor([len(i) for i in ids]),
        "pixel_values": torch.from_numpy(np.concatenate(pixels)) if pixels
        else torch.zeros((0, 1176)),
        "image_grid_thw": torch.from_numpy(np.concatenate(grids)) if grids
        else torch.zeros((0, 3), dtype=torch.int64),
        "images_count": torch.tensor([0 if x["image_grid_thw"] is None
                                      else len(x["image_grid_thw"]) for x in items]),
    }


def worker_init(_):
    torch.set_num_threads(1)


def dataloader_pass(root, records, processor, batch_size):
    loader = DataLoader(Qwen2VlDataset(root, records, processor), batch_size=batch_size,
                        num_workers=WORKERS, worker_init_fn=worker_init, shuffle=False,
                        collate_fn=collate)
    return consume(loader)


# --- the Headrace side ----------------------------------------------------------------

def headrace_pipeline(root, manifest, batch_size, max_pixels, overrides=None):
    return vlm.pipeline(root, "list", manifest=manifest, max_pixels=max_pixels,
                        max_length=MAX_LENGTH, batch_size=batch_size, seed=0, epochs=1,
                        shuffle=False, cpu_threads=2, memory_budget="1GiB",
                        overrides=dict(overrides or {}))


def headrace_pass(root, manifest, batch_size, max_pixels, overrides=None):
    """One pass; with `overrides` batch.pack or batch.max_tokens (the packer's stats
    returned too)."""
    pipe = headrace_pipeline(root, manifest, batch_size, max_pixels, overrides)
    with headrace.Loader(pipe) as loader:
        result = consume(loader)
        stats = loader.stats()
    result["pack"] = {k: v for k, v in stats.items() if k.startswith("pack_")}
    return result


# --- one pass of either ---------------------------------------------------------------

def consume(loader):
    """Rates of one pass, and per sample (by id) its token count and grids."""
    samples = tokens = vision = 0
    per_sample, lengths_per_batch, errors = {}, [], []
    first_at = None
    cpu_start = cpu_seconds()
    start = time.perf_counter()
    for batch in loader:
        now = time.perf_counter()
        if first_at is None:
            first_at = now
        if hasattr(batch, "errors"):
            errors += batch.errors
        lengths = np.asarray(batch["input_ids_lengths"]).astype(np.int64)
        grids = np.asarray(batch["image_grid_thw"]).reshape(-1, 3).astype(np.int64)
        counts = np.asarray(batch["images_count"]).astype(np.int64)
        offsets = np.concatenate([[0], np.cumsum(counts)])
        for k, sid in enumerate(batch["id"]):
            per_sample[sid] = (int(lengths[k]), grids[offsets[k]:offsets[k + 1]].tolist())
        lengths_per_batch.append(lengths.tolist())
        samples += len(lengths)
        tokens += int(lengths.sum())
        vision += int((grids.prod(axis=1) // 4).sum())
    end = time.perf_counter()
    cpu = cpu_seconds() - cpu_start  # a DataLoader joins its workers at the end of the pass
    assert not errors, errors[:3]
    seconds = end - start
    steady = end - first_at if first_at is not None else 0.0
    steady_samples = samples - len(lengths_per_batch[0]) if lengths_per_batch else 0
    steady_tokens = tokens - sum(lengths_per_batch[0]) if lengths_per_batch else 0
    return {"samples": samples, "tokens": tokens, "vision_tokens": vision,
            "seconds": seconds, "time_to_first_batch_s": (first_at or end) - start,
            "cpu_s": cpu, "cores_busy": cpu / seconds,
            "samples_per_s": samples / seconds, "tokens_per_s": tokens / seconds,
            "steady_samples_per_s": steady_samples / steady if steady > 0 else 0.0,
            "steady_tokens_per_s": steady_tokens / steady if steady > 0 else 0.0,
            "per_sample": per_sample, "lengths_per_batch": lengths_per_batch}


def cpu_seconds():
    """CPU time of this process (the engine's threads) and its reaped children (the
    DataLoader's workers, once joined)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


# --- checks ---------------------------------------------------------------------------

def check_samples(records, k):
    """Up to k records: the first of each image count 0..4 (a video one among them when
    there is one), then the first others."""
    chosen = []
    for n in range(5):
        hit = next((i for i, r in enumerate(records) if len(r.get("images", [])) == n), None)
        if hit is not None:
            chosen.append(hit)
    video = next((i for i, r in enumerate(records) if "video" in r), None)
    if video is not None and video not in chosen:
        chosen.append(video)
    chosen += [i for i in range(len(records)) if i not in chosen]
    return sorted(chosen[:k])


def check_outputs(root, records, indices, processor, max_pixels, name):
    """Headrace's outputs on `indices` against the processor's, asserted equal."""
    with tempfile.TemporaryDirectory() as tmp:
        manifest = Path(tmp) / "check.jsonl"
        manifest.write_text("".join(json.dumps(records[i]) + "\n" for i in indices))
        by_id = {records[i]["id"]: records[i] for i in indices}
        worst, seen = 0.0, 0
        with headrace.Loader(headrace_pipeline(root, manifest, 4, max_pixels)) as loader:
            for batch in loader:
                assert not batch.errors, batch.errors
                for sid, grids, pixels, ids, _ in vlm.samples_of(batch, "list"):
                    want, _ = vlm.reference(processor, root, by_id[sid])
                    n = len(by_id[sid].get("images", []))
                    assert len(grids) == n, (name, sid)
                    assert ids.tolist() == want["input_ids"][0].tolist(), (name, sid)
                    if n:
                        assert grids.tolist() == want["image_grid_thw"].tolist(), (name, sid)
                        assert pixels.shape == want["pixel_values"].shape, (name, sid)
                        diff = np.abs(pixels.astype(np.float64) -
                                      want["pixel_values"].astype(np.float64))
                        worst = max(worst, float(diff.max()))
                    seen += 1
    assert seen == len(indices), (seen, indices)
    return worst


def compare_sides(a, b, name_a, name_b):
    """Every sample's token count and grids, equal on both sides."""
    assert a["per_sample"].keys() == b["per_sample"].keys(), (name_a, name_b)
    for sid, value in a["per_sample"].items():
        assert value == b["per_sample"][sid], (name_a, name_b, sid, value, b["per_sample"][sid])


# --- padding --------------------------------------------------------------------------

def padding_per_1000(lengths_per_batch):
    """Padding tokens per 1,000 real tokens with each batch padded to its longest."""
    real = sum(sum(b) for b in lengths_per_batch)
    padding = sum(len(b) * max(b) - sum(b) for b in lengths_per_batch if b)
    return 1000.0 * padding / real if real else 0.0


def rebatch(lengths_per_batch, size):
    flat = [n for b in lengths_per_batch for n in b]
    return [flat[i:i + size] for i in range(0, len(flat), size)]


# --- machine and data -----------------------------------------------------------------

def machine():
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu, "python": platform.python_version(),
            "torch": torch.__version__, "transformers": vlm.transformers.__version__,
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
            "loadavg_start": round(os.getloadavg()[0], 2)}


def data_summary(records):
    images = [len(r.get("images", [])) for r in records]
    pairs = [len(r["conversations"]) // 2 for r in records]
    return {"samples": len(records), "images": sum(images),
            "images_per_sample": {str(n): images.count(n) for n in range(5)},
            "videos": sum("video" in r for r in records),
            "pairs": {"min": min(pairs), "median": statistics.median(pairs), "max": max(pairs)}}


def torchvision_processor(max_pixels):
    """The processor with transformers' torchvision image processor, or the reason why
    not."""
    try:
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import (
            Qwen2VLImageProcessor)
        return vlm.make_processor(max_pixels, Qwen2VLImageProcessor), ""
    except Exception as e:  # noqa: BLE001  (ImportError, or torchvision's own errors)
        return None, f"{type(e).__name__}: {e}".splitlines()[0]


def median_of(rounds, key):
    return statistics.median(r[key] for r in rounds)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="data/vlm")
    ap.add_argument("--samples", type=int, default=128, help="the manifest's first N records")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-pixels", type=int, default=MAX_PIXELS)
    ap.add_argument("--check", type=int, default=5, help="samples compared in full")
    ap.add_argument("--no-torchvision", action="store_true")
    ap.add_argument("--pack-seq-len", type=int, default=8192,
                    help="batch.pack.seq_len of the packed pass (0: none)")
    ap.add_argument("--pack-window", type=int, default=16, help="batch.pack.window")
    ap.add_argument("--max-tokens", type=int, default=16384,
                    help="batch.max_tokens of the token-budget pass (0: none)")
    ap.add_argument("--json", default="")
    ap.add_argument("--yaml", default="",
                    help="only write Headrace's side as a pipeline config (3 epochs) to this "
                         "file, for `headrace run` under a profiler or farm-bench, and exit")
    args = ap.parse_args()
    torch.set_num_threads(1)

    root = Path(args.data).resolve()
    if not (root / "manifest.jsonl").exists():
        print(f"making {root} ({args.samples} samples, mix vlm)")
        headrace.make_sample(str(root), samples=args.samples, seed=0, mix="vlm")
    if args.yaml:
        pipe = headrace_pipeline(root, root / "manifest.jsonl", args.batch_size, args.max_pixels,
                                 {"epochs": 3})
        Path(args.yaml).write_text(pipe.spec().to_yaml())
        print(f"wrote {args.yaml}: build/headrace run {args.yaml} --quiet")
        return
    lines = (root / "manifest.jsonl").read_text().splitlines()[:args.samples]
    records = [json.loads(line) for line in lines]
    results = {"machine": machine(),
               "config": {"data": str(args.data), "samples": len(records), "rounds": args.rounds,
                          "batch_size": args.batch_size, "max_pixels": args.max_pixels,
                          "dataloader_workers": WORKERS, "headrace_cpu_threads": 2,
                          "pixel_values": "f32"},
               "data": data_summary(records)}
    print(f"{results['machine']['nproc']} CPUs ({results['machine']['cpu']}), load "
          f"{results['machine']['loadavg_start']}; {len(records)} samples: "
          f"{results['data']['images']} images {results['data']['images_per_sample']}, "
          f"{results['data']['videos']} with a video, pairs {results['data']['pairs']}")

    processors = {"dataloader_pil": vlm.make_processor(args.max_pixels)}
    if args.no_torchvision:
        results["torchvision"] = "not run: --no-torchvision"
    else:
        tv, why = torchvision_processor(args.max_pixels)
        if tv is None:
            results["torchvision"] = f"not run: {why}"
        else:
            processors["dataloader_torchvision"] = tv
            results["torchvision"] = "run"
    print(f"torchvision backend: {results['torchvision']}")

    # Same outputs: a few samples in full against each processor.
    indices = check_samples(records, args.check)
    results["check"] = {"ids": [records[i]["id"] for i in indices]}
    for name, processor in processors.items():
        worst = check_outputs(root, records, indices, processor, args.max_pixels, name)
        results["check"][name + "_pixel_values_max_abs_diff"] = worst
        print(f"check vs {name}: {len(indices)} samples ({', '.join(results['check']['ids'])}): "
              f"input_ids and image_grid_thw equal, pixel_values max abs diff {worst:.3g}")
        if name == "dataloader_pil":
            assert worst == 0, worst

    with tempfile.TemporaryDirectory() as tmp:
        manifest = Path(tmp) / "bench.jsonl"
        manifest.write_text("".join(line + "\n" for line in lines))
        sides = {name: (lambda p=p: dataloader_pass(root, records, p, args.batch_size))
                 for name, p in processors.items()}
        sides["headrace"] = lambda: headrace_pass(root, manifest, args.batch_size,
                                                  args.max_pixels)
        # The same samples packed (rows of seq_len) and by a token budget, interleaved
        # with the rest: their padding and what they cost in samples/s.
        grouped = {}
        if args.pack_seq_len > 0:
            grouped["headrace_pack"] = {"batch.pack.seq_len": args.pack_seq_len,
                                        "batch.pack.window": args.pack_window}
        if args.max_tokens > 0:
            grouped["headrace_max_tokens"] = {"batch.max_tokens": args.max_tokens,
                                              "batch.pack.window": args.pack_window}
        for name, overrides in grouped.items():
            sides[name] = (lambda o=overrides: headrace_pass(root, manifest, args.batch_size,
                                                             args.max_pixels, o))
        names = list(sides)
        baselines = [n for n in names if n.startswith("dataloader")]
        rounds = {name: [] for name in names}
        for r in range(args.rounds):
            for name in (names if r % 2 == 0 else names[::-1]):
                result = sides[name]()
                rounds[name].append(result)
                print(f"round {r + 1} {name:>22}: {result['samples_per_s']:7.2f} samples/s "
                      f"{result['tokens_per_s']:9.0f} tokens/s (steady "
                      f"{result['steady_samples_per_s']:.2f} / {result['steady_tokens_per_s']:.0f}"
                      f"), first batch {result['time_to_first_batch_s']:.2f} s, "
                      f"{result['cores_busy']:.2f} cores busy")
            for name in baselines:
                compare_sides(rounds["headrace"][-1], rounds[name][-1], "headrace", name)
            for name in grouped:  # packing moves samples, never changes one
                compare_sides(rounds["headrace"][-1], rounds[name][-1], "headrace", name)
    results["load_avg_end"] = round(os.getloadavg()[0], 2)

    keys = ("samples_per_s", "tokens_per_s", "steady_samples_per_s", "steady_tokens_per_s",
            "time_to_first_batch_s", "cores_busy")
    results["sides"] = {}
    for name in names:
        runs = rounds[name]
        results["sides"][name] = {
            "median": {k: median_of(runs, k) for k in keys},
            "rounds": [{k: v for k, v in run.items() if k not in ("per_sample",
                                                                   "lengths_per_batch")}
                       for run in runs]}
    hr = results["sides"]["headrace"]["median"]
    results["ratio"] = {}
    for name in baselines:
        other = results["sides"][name]["median"]
        results["ratio"][name] = {k: hr[k] / other[k] for k in keys[:4]}
        print(f"headrace / {name}: samples/s {results['ratio'][name]['samples_per_s']:.2f}x, "
              f"tokens/s {results['ratio'][name]['tokens_per_s']:.2f}x (steady "
              f"{results['ratio'][name]['steady_samples_per_s']:.2f}x); medians of "
              f"{args.rounds} rounds")
    first = rounds["headrace"][0]
    results["tokens"] = {"total": first["tokens"], "vision": first["vision_tokens"],
                         "text": first["tokens"] - first["vision_tokens"]}

    # Padding on the VLM mix, from the ragged lengths Headrace delivered (manifest order).
    batches = first["lengths_per_batch"]
    padding = {"pad_to_longest": {"batch_size": args.batch_size,
                                  "per_1000_real_tokens": padding_per_1000(batches)},
               "pad_to_longest_by_batch_size": {
                   str(b): padding_per_1000(rebatch(batches, b)) for b in (4, 8, 16, 32)}}
    print(f"pad-to-longest, batch {args.batch_size}: "
          f"{padding['pad_to_longest']['per_1000_real_tokens']:.0f} padding tokens per 1,000 "
          f"real ({first['tokens']} real tokens, {first['vision_tokens']} of them vision)")

    # batch.pack: the rows' padding (rows x seq_len - tokens, from the packer's stats);
    # batch.max_tokens: each token batch padded to its longest sample (what a model
    # without varlen attention pays), and the budget left unused. Their cost: samples/s
    # against the unpacked pass, medians of the same interleaved rounds.
    results["grouping_cost"] = {}
    if "headrace_pack" in rounds:
        stats = rounds["headrace_pack"][0]["pack"]
        padding["pack"] = {"seq_len": args.pack_seq_len, "window": args.pack_window,
                           "per_1000_real_tokens":
                               1000.0 * stats["pack_padding_tokens"] / stats["pack_tokens"],
                           "fill": stats["pack_fill"], "rows": stats["pack_rows"],
                           "truncated": stats["pack_truncated"]}
    if "headrace_max_tokens" in rounds:
        run = rounds["headrace_max_tokens"][0]
        stats = run["pack"]
        padding["max_tokens"] = {
            "max_tokens": args.max_tokens, "window": args.pack_window,
            "pad_to_longest_per_1000_real_tokens": padding_per_1000(run["lengths_per_batch"]),
            "unused_budget_per_1000_real_tokens":
                1000.0 * stats["pack_padding_tokens"] / stats["pack_tokens"],
            "batches": len(run["lengths_per_batch"])}
    for name in grouped:
        results["grouping_cost"][name] = (median_of(rounds[name], "samples_per_s") /
                                          median_of(rounds["headrace"], "samples_per_s"))
        print(f"{name}: {results['grouping_cost'][name]:.3f}x the unpacked samples/s; "
              f"padding {padding[name.split('_', 1)[1]]}")
    results["padding"] = padding

    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
