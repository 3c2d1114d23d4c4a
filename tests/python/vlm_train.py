"""A real client: a tiny vision-language model trained on CPU through Headrace.

    python vlm_train.py DATASET OUT.json [--checkpoint-at K --checkpoint CKPT] [--resume CKPT]

A ViT-style image encoder (8x8 patches) and a token embedding feed a small causal
transformer that predicts the assistant's tokens. The run writes, per step, the loss and
a digest of the batch it trained on, so that a test can compare an uninterrupted run
with one restarted in a new process from a mid-epoch checkpoint of model + loader.
"""
import argparse
import hashlib
import json

import torch
from torch import nn

import headrace
import headrace.torch as ht

IMAGE = 32
PATCH = 8
MAX_LEN = 48
VOCAB = 2000
EPOCHS = 4


class TinyVLM(nn.Module):
    def __init__(self, dim=64, layers=2, heads=4):
        super().__init__()
        self.patches = nn.Conv2d(3, dim, kernel_size=PATCH, stride=PATCH)
        n_patches = (IMAGE // PATCH) ** 2
        self.image_pos = nn.Parameter(torch.zeros(1, n_patches, dim))
        self.tokens = nn.Embedding(VOCAB, dim)
        self.text_pos = nn.Parameter(torch.zeros(1, MAX_LEN, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, dim * 2, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(dim, VOCAB)

    def forward(self, image, input_ids):
        img = self.patches(image).flatten(2).transpose(1, 2) + self.image_pos
        txt = self.tokens(input_ids) + self.text_pos
        x = torch.cat([img, txt], dim=1)
        n_img, n = img.shape[1], x.shape[1]
        # Image tokens see each other; a text token sees the image and earlier text.
        mask = torch.full((n, n), float("-inf")).triu(1)
        mask[:, :n_img] = 0.0
        x = self.encoder(x, mask=mask)
        return self.head(x[:, n_img:])


def pipeline(dataset):
    ops = headrace.ops
    return headrace.Pipeline(
        source=f"{dataset}/manifest.jsonl",
        ops=[ops.decode(), ops.resize(shorter_side=IMAGE), ops.center_crop(IMAGE),
             ops.normalize(), ops.tokenize(f"{dataset}/tokenizer.model", max_length=MAX_LEN)],
        batch_size=8, seed=3, cpu_threads=2, memory_budget="64MiB")  # epochs: the loop's


def digest(batch):
    h = hashlib.sha256()
    for name in ("index", "image", "input_ids", "labels"):
        h.update(batch[name].numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("out")
    ap.add_argument("--checkpoint-at", type=int, default=-1)
    ap.add_argument("--checkpoint")
    ap.add_argument("--resume")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = TinyVLM()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loader = ht.TorchLoader(pipeline(args.dataset), device="cpu")
    step, start_epoch = 0, 0
    if args.resume:
        ckpt = torch.load(args.resume, weights_only=False)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        loader.load_state_dict(ckpt["loader"])
        step, start_epoch = ckpt["step"], ckpt["epoch"]
    record = {"start_step": step, "steps": []}
    loss_fn = nn.CrossEntropyLoss(ignore_index=-100)
    # The usual PyTorch loop: one `for` per epoch, set_epoch as with DistributedSampler
    # (after a resume, the first `for` finishes the checkpointed epoch).
    for epoch in range(start_epoch, EPOCHS):
        loader.set_epoch(epoch)
        for batch in loader:
            logits = model(batch["image"], batch["input_ids"])
            # Next-token prediction on the assistant tokens (labels are -100 elsewhere).
            loss = loss_fn(logits[:, :-1].reshape(-1, VOCAB), batch["labels"][:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            record["steps"].append({"loss": loss.item(), "digest": digest(batch),
                                    "epoch": epoch})
            if step == args.checkpoint_at:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                            "loader": loader.state_dict(), "step": step, "epoch": epoch},
                           args.checkpoint)
    record["wait_time_ratio"] = loader.wait_time_ratio
    with open(args.out, "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    main()
