"""A tiny image+text model trained by the Hugging Face Trainer on a Headrace pipeline,
checkpointed, and resumed from the Trainer's checkpoint exactly (python/headrace/hf.py).

    python examples/hf_trainer.py --data data/sample --out out/hf --max-steps 6
    python examples/hf_trainer.py --data data/sample --out out/hf --resume   # to the end

Under torchrun each process reads its own rank's batches (args.process_index of
args.world_size); accelerate does not re-shard them. tests/python/test_trainers_hf.py runs
this file's train().
"""
import argparse
import json
from pathlib import Path
from typing import List, Optional

import torch
import transformers

import headrace
import headrace.hf


class TinyVLM(torch.nn.Module):
    """Pooled pixels and mean token embeddings -> a score per sample; the loss pulls the
    image's score towards the text's. Records the sample indices of every batch it sees."""

    def __init__(self, vocab: int = 1024, dim: int = 16):
        super().__init__()
        self.image = torch.nn.Linear(3 * 7 * 7, dim)
        self.text = torch.nn.EmbeddingBag(vocab, dim)
        self.vocab = vocab
        self.seen: List[List[int]] = []

    def forward(self, image, input_ids, index):  # the Trainer passes these fields only
        self.seen.append(index.tolist())
        pooled = torch.nn.functional.adaptive_avg_pool2d(image, 7).flatten(1)
        text = self.text(input_ids.long() % self.vocab)
        return {"loss": torch.nn.functional.mse_loss(self.image(pooled), text)}


def pipeline(data: Path) -> headrace.Pipeline:
    ops = headrace.ops
    return headrace.Pipeline(
        source=data / "manifest.jsonl",
        ops=[ops.decode(), ops.resize(shorter_side=64), ops.center_crop(56), ops.normalize(),
             ops.tokenize(data / "tokenizer.model", max_length=48)],
        batch_size=8, seed=1, cpu_threads=2, memory_budget="64MiB")


def train(data: Path, out: Path, *, epochs: int = 3, max_steps: int = -1, save_steps: int = 2,
          gradient_accumulation_steps: int = 2, resume: Optional[str] = None,
          ignore_data_skip: bool = False) -> TinyVLM:
    """Trains (or resumes: a checkpoint folder, or "last"); returns the model, whose
    ``seen`` lists the batches it trained on in this call."""
    torch.manual_seed(0)
    model = TinyVLM()
    args = transformers.TrainingArguments(
        output_dir=str(out), num_train_epochs=epochs, max_steps=max_steps,
        per_device_train_batch_size=8, gradient_accumulation_steps=gradient_accumulation_steps,
        learning_rate=1e-2, save_strategy="steps", save_steps=save_steps, logging_steps=1,
        report_to=[], use_cpu=True, disable_tqdm=True, seed=0, ignore_data_skip=ignore_data_skip)
    trainer = headrace.hf.HeadraceTrainer(model=model, args=args, train_loader=pipeline(data))
    try:
        trainer.train(resume_from_checkpoint=True if resume == "last" else resume)
    finally:
        trainer.headrace_loader.close()
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("data/sample"))
    parser.add_argument("--out", type=Path, default=Path("out/hf_trainer"))
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=-1,
                        help="stop after this many optimizer steps (then --resume)")
    parser.add_argument("--resume", action="store_true", help="from the last checkpoint")
    options = parser.parse_args()
    model = train(options.data, options.out, epochs=options.epochs,
                  max_steps=options.max_steps, resume="last" if options.resume else None)
    print(json.dumps({"batches": len(model.seen), "first": model.seen[:1]}))


if __name__ == "__main__":
    main()
