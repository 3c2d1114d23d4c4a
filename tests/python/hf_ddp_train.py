"""Run by test_trainers_hf_ddp.py: 2 CPU ranks (gloo, DDP; the environment torchrun would
set), each running examples/hf_trainer.py's train() uninterrupted, then resumed from its
checkpoint-2 into another folder; writes each rank's batches, and a plain headrace.Loader's
for that rank, to OUT/rank{R}.json.

    python tests/python/hf_ddp_train.py DATASET OUT

The ranks are spawned, not forked: a rank forked after the parent had imported torch and
transformers died once in CI with SIGSEGV (a fork copies no threads, but the state of
the libraries that had started some); faulthandler prints a crashed rank's Python stacks,
and Headrace's crash trace, installed after it so that it runs first, the native stack of
the thread that faulted (src/headrace/observe/crash_trace.h).
"""
import faulthandler
import importlib.util
import json
import os
import socket
import sys
from pathlib import Path

import numpy
import torch.multiprocessing as mp

import headrace

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("hf_trainer", REPO / "examples" / "hf_trainer.py")
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)
WORLD = 2


def rank_main(rank: int, port: int, data: Path, out: Path) -> None:
    faulthandler.enable()
    headrace._headrace._install_crash_trace()
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD),
                      LOCAL_WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # Per rank: 24 samples, 3 batches an epoch, one per step; checkpoint-2 is mid-epoch 0.
    full = example.train(data, out / "full", gradient_accumulation_steps=1)
    resumed = example.train(data, out / "resumed", gradient_accumulation_steps=1,
                            resume=str(out / "full" / "checkpoint-2"))
    # What a plain Loader gives this rank over the same 3 epochs, for comparison.
    with headrace.Loader(example.pipeline(data), rank=rank, world_size=WORLD) as loader:
        plain = [numpy.asarray(batch["index"]).tolist() for _ in range(3) for batch in loader]
    (out / f"rank{rank}.json").write_text(
        json.dumps({"full": full.seen, "resumed": resumed.seen, "loader": plain}))


if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free_port = s.getsockname()[1]
    mp.start_processes(rank_main, args=(free_port, Path(sys.argv[1]), Path(sys.argv[2])),
                       nprocs=WORLD, start_method="spawn")
