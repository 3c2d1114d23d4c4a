"""The GPU hand-off, checked on a GPU (issue 13): run by tests/gpu/check.sh
(`make test-gpu`) on a machine with a CUDA device and a CUDA build of torch.

It checks, and prints one line per check plus a JSON summary (``--json PATH``):
  pinned     the engine's batches are in pinned host memory (cudaPointerGetAttributes)
             and are the very memory the decoders wrote (torch sees the engine's pointer);
  digests    N batches (default 2,000) through TorchLoader(device="cuda", prefetch=2),
             each batch's checksum computed on the GPU equal to the digest of the same
             batch copied synchronously from a heap-memory Loader (a host buffer reused
             while its copy still reads it shows up as a mismatch);
  overlap    the copies overlap a simulated GPU step: the gap between one step's end and
             the next one's start, timed with CUDA events, is <= 2% of the step;
  pool       no cudaHostAlloc or cudaFreeHost per batch in the steady state;
  bandwidth  H2D from the engine's pinned batch vs torch's own pinned copy of the bytes;
  h2d_s      what TorchLoader.stats() reports;
  oom        a device out of memory for the prefetched batches: an error naming the
             bytes and the depth.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

import headrace
import headrace.torch as ht


def pipeline(dataset: Path, epochs: int, batch_size: int):
    ops = headrace.ops
    return headrace.Pipeline(
        source=dataset / "manifest.jsonl",
        ops=[ops.decode(), ops.resize(shorter_side=160), ops.center_crop(144),
             ops.normalize(), ops.tokenize(dataset / "tokenizer.model", max_length=64)],
        batch_size=batch_size, seed=7, epochs=epochs, cpu_threads=os.cpu_count() or 4,
        memory_budget="1GiB")


class Digest:
    """Two int64 sums over a tensor's bytes (plain, and position-weighted so that moved
    bytes count), computed where the tensor is."""

    def __init__(self, device):
        self.device = device
        self.weights = torch.empty(0, dtype=torch.int64, device=device)

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        x = t.contiguous().reshape(-1).view(torch.uint8).to(torch.int64)
        if self.weights.numel() < x.numel():
            self.weights = torch.arange(x.numel(), device=self.device) % 65521 + 1
        return torch.stack([x.sum(), (x * self.weights[:x.numel()]).sum()])

    def batch(self, tensors) -> torch.Tensor:
        return torch.cat([self(t) for name, t in sorted(tensors.items())
                          if isinstance(t, torch.Tensor)])


def cuda_memory_type(ptr: int) -> int:
    """cudaPointerGetAttributes(ptr).type: 1 = host (pinned), 0 = unregistered."""
    import glob
    cudart = None
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            cudart = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if cudart is None:  # torch's own copy, found through its package
        for path in glob.glob(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia",
                                           "*", "lib", "libcudart.so*")):
            cudart = ctypes.CDLL(path)
            break

    class Attributes(ctypes.Structure):
        _fields_ = [("type", ctypes.c_int), ("device", ctypes.c_int),
                    ("devicePointer", ctypes.c_void_p), ("hostPointer", ctypes.c_void_p)]

    attrs = Attributes()
    rc = cudart.cudaPointerGetAttributes(ctypes.byref(attrs), ctypes.c_void_p(ptr))
    if rc != 0:
        raise RuntimeError(f"cudaPointerGetAttributes failed: {rc}")
    return attrs.type


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=2000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--samples", type=int, default=640)
    ap.add_argument("--prefetch", type=int, default=2)
    ap.add_argument("--dataset", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("tests/gpu/check.py: no CUDA device (or torch is a CPU build): this check "
              "needs a GPU machine", file=sys.stderr)
        return 2
    dev = torch.device("cuda", torch.cuda.current_device())
    results = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__}
    failures = []

    def check(name, ok, detail):
        results[name] = {"ok": bool(ok), **detail}
        print(f"{'PASS' if ok else 'FAIL'} {name}: {json.dumps(detail)}", flush=True)
        if not ok:
            failures.append(name)

    tmp = tempfile.TemporaryDirectory()
    dataset = args.dataset or Path(tmp.name) / "data"
    if not (dataset / "manifest.jsonl").exists():
        headrace.make_sample(str(dataset), samples=args.samples, seed=3)
    per_epoch = args.samples // args.batch_size
    epochs = -(-args.batches // per_epoch)
    digest = Digest(dev)

    # --- pinned, written in place ---------------------------------------------------
    loader = headrace.Loader(pipeline(dataset, 1, args.batch_size), pin_memory=True)
    batch = next(iter(loader))
    host = {k: torch.from_dlpack(v) for k, v in batch.items() if not isinstance(v, list)}
    types = {k: cuda_memory_type(t.data_ptr()) for k, t in host.items()}
    same = {k: t.data_ptr() == batch.data_ptrs.get(k) for k, t in host.items()}
    check("pinned", loader.pinned and all(v == 1 for v in types.values()) and all(same.values())
          and all(t.is_pinned() for t in host.values()),
          {"loader.pinned": loader.pinned, "cudaMemoryType": types, "zero_copy": same})
    del host, batch
    loader.close()

    # --- reference digests: heap memory, synchronous copies -------------------------
    t0 = time.perf_counter()
    ref = []
    reference = headrace.Loader(pipeline(dataset, epochs, args.batch_size))
    for b in reference.run():
        ref.append(digest.batch({k: torch.from_dlpack(v).to(dev) for k, v in b.items()
                                 if not isinstance(v, list)}))
        if len(ref) == args.batches:
            break
    reference.close()
    ref = torch.stack(ref)
    torch.cuda.synchronize()
    engine_batch_s = (time.perf_counter() - t0) / len(ref)
    # The simulated step: longer than the engine needs per batch, so that a gap measures
    # the hand-off and not the engine.
    step_s = max(0.006, 1.5 * engine_batch_s)
    cycles_per_s = calibrate_sleep()
    step_cycles = int(step_s * cycles_per_s)

    # --- 2,000 batches through TorchLoader(device="cuda") -----------------------------
    pinned_before = headrace._headrace._pinned_stats()
    loader = ht.TorchLoader(pipeline(dataset, epochs, args.batch_size), device=dev,
                            prefetch=args.prefetch)
    got, starts, ends = [], [], []
    pinned_mid = None
    for epoch in range(epochs):
        for b in loader:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                enable_timing=True)
            if len(ends) >= 3:
                ends[-3].synchronize()  # a trainer that reads its loss a few steps late
            start.record()
            torch.cuda._sleep(step_cycles)  # the model's step
            got.append(digest.batch(b))
            end.record()
            starts.append(start)
            ends.append(end)
            if len(got) == args.batches // 2:
                pinned_mid = headrace._headrace._pinned_stats()
            if len(got) == args.batches:
                break
        if len(got) == args.batches:
            break
    torch.cuda.synchronize()
    stats = loader.stats()
    pinned_after = headrace._headrace._pinned_stats()
    loader.close()
    got = torch.stack(got)
    bad = (got != ref[:len(got)]).any(dim=1).nonzero().flatten().tolist()
    check("digests", len(got) == args.batches and not bad,
          {"batches": len(got), "mismatched": len(bad), "first_mismatches": bad[:10]})

    steps = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    gaps = [e.elapsed_time(s) for e, s in zip(ends[:-1], starts[1:])]
    skip = min(20, len(gaps) // 10)  # the first steps wait for the engine's cold start
    mean_step, mean_gap = statistics.fmean(steps[skip:]), statistics.fmean(gaps[skip:])
    check("overlap", mean_gap <= 0.02 * mean_step,
          {"step_ms": round(mean_step, 3), "gap_ms_mean": round(mean_gap, 4),
           "gap_ms_p99": round(sorted(gaps[skip:])[int(0.99 * (len(gaps) - skip))], 4),
           "gap_over_step": round(mean_gap / mean_step, 5),
           "engine_ms_per_batch": round(1000 * engine_batch_s, 3)})

    steady = {k: pinned_after[k] - pinned_mid[k] for k in ("host_allocs", "host_frees")}
    check("pool", steady["host_allocs"] == 0 and steady["host_frees"] == 0,
          {"before": pinned_before, "at_half": pinned_mid, "after": pinned_after,
           "second_half": steady})
    check("h2d_s", stats["h2d_s"] >= 0.0 and stats["batches"] == args.batches,
          {k: (round(v, 5) if isinstance(v, float) else v) for k, v in stats.items()})

    # --- bandwidth ---------------------------------------------------------------------
    loader = headrace.Loader(pipeline(dataset, 1, 128), pin_memory=True)
    batch = next(iter(loader))
    engine_host = torch.from_dlpack(batch["image"])
    torch_host = torch.empty_like(engine_host, pin_memory=True).copy_(engine_host)
    pageable = engine_host.clone()
    rates = {name: h2d_gbps(t, dev) for name, t in
             (("engine_pinned", engine_host), ("torch_pinned", torch_host),
              ("pageable", pageable))}
    ratio = rates["engine_pinned"] / rates["torch_pinned"]
    check("bandwidth", ratio >= 0.9,
          {"bytes": engine_host.numel() * engine_host.element_size(),
           **{f"{k}_GBps": round(v, 2) for k, v in rates.items()},
           "engine_over_torch": round(ratio, 3)})
    del batch, engine_host, torch_host, pageable
    loader.close()

    # --- out of device memory ------------------------------------------------------------
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(dev).total_memory
    torch.cuda.set_per_process_memory_fraction((4 << 20) / total, dev)
    message = ""
    try:
        with ht.TorchLoader(pipeline(dataset, 1, args.batch_size), device=dev,
                            prefetch=args.prefetch) as small:
            for _ in small:
                pass
    except torch.cuda.OutOfMemoryError as e:
        message = str(e).splitlines()[0]
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, dev)
    check("oom", "bytes" in message and f"prefetch={args.prefetch}" in message,
          {"message": message})

    results["failures"] = failures
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print("tests/gpu/check.py:", "all passed" if not failures else f"FAILED: {failures}")
    return 1 if failures else 0


def calibrate_sleep() -> float:
    """GPU clock cycles per second of torch.cuda._sleep."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 20_000_000
    torch.cuda._sleep(1000)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / (start.elapsed_time(end) / 1000)


def h2d_gbps(host: torch.Tensor, dev) -> float:
    dst = torch.empty(host.shape, dtype=host.dtype, device=dev)
    for _ in range(3):
        dst.copy_(host, non_blocking=True)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = 20
    start.record()
    for _ in range(reps):
        dst.copy_(host, non_blocking=True)
    end.record()
    end.synchronize()
    return reps * host.numel() * host.element_size() / (start.elapsed_time(end) / 1000) / 1e9


if __name__ == "__main__":
    sys.exit(main())
