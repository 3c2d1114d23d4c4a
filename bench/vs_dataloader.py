"""Headrace vs the PyTorch DataLoader (PIL, num_workers=2), side by side in one run.

Same dataset, same transforms (decode, resize shorter side 256, center crop 224,
normalize to f32 CHW, tokenize to 128 with an assistant-only loss mask), same 2 cores,
batch 64. Reports samples/s for a loop that consumes without computing, the wait-time
ratio for a loop with a simulated step, and checks that torch.from_dlpack adds no copy.

    .venv/bin/python bench/vs_dataloader.py [--data data/sample] [--samples 1000]
                                            [--step-ms 150] [--json bench/python.json]

PyTorch's DataLoader side uses PIL + numpy (torchvision from PyPI does not import beside
torch 2.13.0) and the sentencepiece package on the same tokenizer.model, with the same
chat template as text.tokenize.
"""
import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import sentencepiece as spm
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

import headrace
import headrace.torch as ht

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
MAX_LEN = 128
PREFIX = {"human": "<|user|>\n", "user": "<|user|>\n", "gpt": "<|assistant|>\n",
          "assistant": "<|assistant|>\n", "system": "<|system|>\n"}


class PilVqa(Dataset):
    """The usual user's dataset: one JSONL line -> PIL transforms + sentencepiece."""

    def __init__(self, data: Path, samples: int):
        lines = (data / "manifest.jsonl").read_text().splitlines()[:samples]
        self.records = [json.loads(line) for line in lines]
        self.root = data
        self.model_path = str(data / "tokenizer.model")
        self.sp = None

    def __len__(self):
        return len(self.records)

    def tokenize(self, turns):
        if self.sp is None:
            self.sp = spm.SentencePieceProcessor(model_file=self.model_path)
        ids, labels = [self.sp.bos_id()], [-100]
        for turn in turns:
            role = turn["from"]
            prefix = self.sp.encode(PREFIX[role])
            body = self.sp.encode(turn["value"]) + self.sp.encode("\n")
            trained = role in ("gpt", "assistant")
            ids += prefix + body
            labels += [-100] * len(prefix) + (body if trained else [-100] * len(body))
        ids.append(self.sp.eos_id())
        labels.append(-100)
        ids, labels = ids[:MAX_LEN], labels[:MAX_LEN]
        pad = MAX_LEN - len(ids)
        mask = [1] * len(ids) + [0] * pad
        return (np.array(ids + [3] * pad, np.int64), np.array(mask, np.int64),
                np.array(labels + [-100] * pad, np.int64))

    def __getitem__(self, i):
        rec = self.records[i]
        with Image.open(self.root / rec["image"]) as im:
            im = im.convert("RGB")
            w, h = im.size
            s = 256 / min(w, h)
            im = im.resize((max(1, round(w * s)), max(1, round(h * s))), Image.BILINEAR)
            w, h = im.size
            left, top = (w - 224) // 2, (h - 224) // 2
            im = im.crop((left, top, left + 224, top + 224))
            x = np.asarray(im, np.float32) / 255.0
        x = ((x - MEAN) / STD).transpose(2, 0, 1)
        ids, mask, labels = self.tokenize(rec["conversations"])
        return {"image": torch.from_numpy(np.ascontiguousarray(x)), "input_ids": torch.from_numpy(ids),
                "attention_mask": torch.from_numpy(mask), "labels": torch.from_numpy(labels),
                "index": torch.tensor(i)}


def worker_init(_):
    torch.set_num_threads(1)


def dataloader(data, samples):
    return DataLoader(PilVqa(data, samples), batch_size=64, num_workers=2,
                      worker_init_fn=worker_init, shuffle=True,
                      generator=torch.Generator().manual_seed(0))


def headrace_loader(data, samples):
    ops = headrace.ops
    manifest = data / "manifest.jsonl"
    if samples < sum(1 for _ in open(manifest)):
        sub = Path(os.environ.get("TMPDIR", "/tmp")) / f"hr-bench-{samples}.jsonl"
        sub.write_text("".join(open(manifest).readlines()[:samples]))
        source = {"manifest": str(sub), "root": str(data)}
    else:
        source = {"manifest": str(manifest)}
    pipeline = headrace.Pipeline(
        source=source,
        ops=[ops.decode(), ops.resize(shorter_side=256), ops.center_crop(224), ops.normalize(),
             ops.tokenize(data / "tokenizer.model", max_length=MAX_LEN)],
        batch_size=64, seed=0, epochs=1, cpu_threads=2)
    return ht.TorchLoader(pipeline, device=None)


def consume(loader, step_s=0.0):
    """samples/s and the wait-time ratio (cold start apart) of one pass."""
    samples, wait, first_at = 0, 0.0, None
    t_start = time.perf_counter()
    it = iter(loader)
    while True:
        t0 = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            break
        t1 = time.perf_counter()
        if first_at is None:
            first_at = t1
        else:
            wait += t1 - t0
        samples += batch["image"].shape[0]
        if step_s:
            time.sleep(step_s)  # the simulated training step
    end = time.perf_counter()
    steady = end - first_at
    return {"samples": samples, "seconds": end - t_start, "samples_per_s": samples / (end - t_start),
            "steady_samples_per_s": samples / steady if steady > 0 else 0.0,
            "time_to_first_batch_s": first_at - t_start,
            "wait_time_ratio": wait / steady if steady > 0 else 0.0}


def zero_copy_check(data):
    loader = headrace_loader(data, 64)
    batch = next(iter(loader.loader))
    ok = all(torch.from_dlpack(t).data_ptr() == batch.data_ptrs[k] == np.asarray(t).ctypes.data
             for k, t in batch.items() if k in batch.data_ptrs)
    loader.close()
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="data/sample")
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--step-ms", type=float, default=150.0)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    data = Path(args.data)
    if not (data / "manifest.jsonl").exists():
        print(f"making {data} ({args.samples} samples)")
        headrace.make_sample(str(data), samples=args.samples, seed=0)
    torch.set_num_threads(1)
    results = {"cores": os.cpu_count(), "samples": args.samples, "batch_size": 64,
               "step_ms": args.step_ms}
    results["zero_copy"] = zero_copy_check(data)
    print(f"torch.from_dlpack shares the engine's memory (data pointers equal): "
          f"{results['zero_copy']}")
    for name, make in (("headrace", headrace_loader), ("dataloader", dataloader)):
        r = consume(make(data, args.samples))
        print(f"{name:>10} consume only: {r['samples_per_s']:7.1f} samples/s "
              f"(steady {r['steady_samples_per_s']:.1f}, first batch {r['time_to_first_batch_s']:.2f} s)")
        s = consume(make(data, args.samples), step_s=args.step_ms / 1000)
        print(f"{name:>10} with a {args.step_ms:.0f} ms step: wait-time ratio "
              f"{s['wait_time_ratio']:.3f}, {s['samples_per_s']:.1f} samples/s")
        results[name] = {"consume": r, "step": s}
    speedup = results["headrace"]["consume"]["samples_per_s"] / results["dataloader"]["consume"]["samples_per_s"]
    results["speedup"] = speedup
    print(f"headrace / dataloader samples/s: {speedup:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
