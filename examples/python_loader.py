"""The README's Python example: the sample pipeline into PyTorch, zero-copy, resumable."""
import time

import torch

import headrace
import headrace.torch as ht

ops = headrace.ops
pipeline = headrace.Pipeline(
    source="data/sample/manifest.jsonl",
    ops=[ops.decode(), ops.resize(shorter_side=256), ops.center_crop(224), ops.normalize(),
         ops.tokenize("data/sample/tokenizer.model", max_length=128)],
    batch_size=32, seed=0)
loader = ht.TorchLoader(pipeline, device="cuda" if torch.cuda.is_available() else None)
for epoch in range(2):
    loader.set_epoch(epoch)  # optional, as with DistributedSampler
    for step, batch in enumerate(loader):  # one epoch per `for`, each its own shuffle
        image, ids = batch["image"], batch["input_ids"]  # torch.Tensor, no copy on the host
        time.sleep(0.1)  # stands in for the training step (as trainer.step_ms does in `run`)
        if step == 4:
            state = loader.state_dict()  # save beside the model; load_state_dict resumes
            break  # a short demo: the next `for` is the next epoch
print(f"python: 2 epochs x 5 of {len(loader)} batches of {tuple(image.shape)} images, "
      f"{tuple(ids.shape)} tokens; wait-time ratio {loader.wait_time_ratio:.2f}; resume "
      f"state epoch {state['epoch']}, batch {state['batch_in_epoch']}")
