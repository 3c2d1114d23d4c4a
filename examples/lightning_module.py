"""A tiny image+text model trained by Lightning on a Headrace pipeline
(headrace.lightning.HeadraceDataModule), checkpointed every 2 steps and resumed exactly.

    python examples/lightning_module.py --data data/sample --out out/lightning
    python examples/lightning_module.py --data data/sample --out out/lightning \
        --resume out/lightning/epoch=0-step=4.ckpt

tests/python/test_trainers_lightning.py runs this file's fit().
"""
import argparse
import json
from pathlib import Path
from typing import List, Optional

import lightning.pytorch as pl
import torch

import headrace
import headrace.lightning


class TinyVLM(pl.LightningModule):
    """Pooled pixels and mean token embeddings; the loss pulls the image's vector towards
    the text's. Records the sample indices of every batch it trains on."""

    def __init__(self, vocab: int = 1024, dim: int = 16):
        super().__init__()
        self.image = torch.nn.Linear(3 * 7 * 7, dim)
        self.text = torch.nn.EmbeddingBag(vocab, dim)
        self.vocab = vocab
        self.seen: List[List[int]] = []

    def training_step(self, batch, batch_idx):
        self.seen.append(batch["index"].tolist())
        pooled = torch.nn.functional.adaptive_avg_pool2d(batch["image"], 7).flatten(1)
        text = self.text(batch["input_ids"].long() % self.vocab)
        return torch.nn.functional.mse_loss(self.image(pooled), text)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


def pipeline(data: Path) -> headrace.Pipeline:
    ops = headrace.ops
    return headrace.Pipeline(
        source=data / "manifest.jsonl",
        ops=[ops.decode(), ops.resize(shorter_side=64), ops.center_crop(56), ops.normalize(),
             ops.tokenize(data / "tokenizer.model", max_length=48)],
        batch_size=8, seed=1, cpu_threads=2, memory_budget="64MiB")


def fit(data: Path, out: Path, *, epochs: int = 3, every_n_steps: int = 2,
        resume: Optional[str] = None) -> TinyVLM:
    """Fits (or resumes from the checkpoint ``resume``); returns the model, whose ``seen``
    lists the batches it trained on in this call."""
    pl.seed_everything(0, verbose=False)
    model = TinyVLM()
    data_module = headrace.lightning.HeadraceDataModule(train=pipeline(data))
    checkpoints = pl.callbacks.ModelCheckpoint(dirpath=out, every_n_train_steps=every_n_steps,
                                               save_top_k=-1)
    trainer = pl.Trainer(max_epochs=epochs, accelerator="cpu", devices=1, logger=False,
                         callbacks=[checkpoints], enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(model, datamodule=data_module, ckpt_path=resume)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("data/sample"))
    parser.add_argument("--out", type=Path, default=Path("out/lightning"))
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--resume", help="a checkpoint to resume from")
    options = parser.parse_args()
    model = fit(options.data, options.out, epochs=options.epochs, resume=options.resume)
    print(json.dumps({"batches": len(model.seen), "first": model.seen[:1]}))


if __name__ == "__main__":
    main()
