"""Run by test_trainers_lightning_ddp.py: 2 CPU ranks (gloo, DDP; the environment torchrun
would set, so Lightning launches nothing itself), each fitting examples/lightning_module.py's
model, then resuming from its step-2 checkpoint in the same processes; writes each rank's
batches, and a plain headrace.Loader's for that rank, to OUT/rank{R}.json.

    python tests/python/lightning_ddp_fit.py DATASET OUT

The ranks are spawned, not forked: a rank forked after the parent had imported torch and
Lightning died once in CI with SIGSEGV (a fork copies no threads, but the state of
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

import lightning.pytorch as pl
import numpy
import torch.multiprocessing as mp

import headrace
import headrace.lightning

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("lightning_module",
                                              REPO / "examples" / "lightning_module.py")
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)
WORLD = 2


def fit(data: Path, out: Path, resume=None):
    pl.seed_everything(0, verbose=False)
    model = example.TinyVLM()
    trainer = pl.Trainer(
        max_epochs=3, accelerator="cpu", devices=WORLD, strategy="ddp", logger=False,
        callbacks=[pl.callbacks.ModelCheckpoint(dirpath=out, every_n_train_steps=2,
                                                save_top_k=-1)],
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(model, datamodule=headrace.lightning.HeadraceDataModule(
        train=example.pipeline(data)), ckpt_path=resume)
    return model


def rank_main(rank: int, port: int, data: Path, out: Path) -> None:
    faulthandler.enable()
    headrace._headrace._install_crash_trace()
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD),
                      NODE_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # Per rank: 24 samples, 3 batches an epoch; the step-2 checkpoint is mid-epoch 0.
    full = fit(data, out / "full")
    resumed = fit(data, out / "resumed", resume=str(out / "full" / "epoch=0-step=2.ckpt"))
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
