"""batch.max_tokens under DDP (issue 27): token-budget batches come in counts that follow
the data, so two ranks can have different numbers of batches in an epoch, and a DDP step
on one rank would wait forever for the other. TorchLoader's even_steps (on by default
with max_tokens under torch.distributed) has the ranks agree before each batch, and ends
the epoch for all when the first runs out.

Real processes (torch.multiprocessing, gloo), 2 ranks, three epochs: in epoch 0 the
ranks have equal counts, in epoch 1 rank 0 has more, in epoch 2 rank 1. With even_steps
both yield the smaller count each epoch, each its own batches in order (the prefix of
what its loader alone gives: the epoch after a cut starts where it should), the longer
one counts a cut epoch, and a state dict taken right after a cut is the next epoch's
start. With even_steps=False
the counts differ (the data does exercise the rule)."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

import headrace
from headrace.torch import TorchLoader

MAX_TOKENS = 150
EPOCHS = 3


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("even_steps")
    headrace.make_sample(str(out), samples=64, seed=5, threads=2)
    return out


def pipeline(root):
    ops = headrace.ops
    return headrace.Pipeline(
        Path(root) / "manifest.jsonl",
        ops=[ops.tokenize(Path(root) / "tokenizer.model", pad=False, max_length=64)],
        batch_size=8, epochs=EPOCHS, max_tokens=MAX_TOKENS, pack={"window": 4}, seed=1,
        cpu_threads=1)


def indices(batch):
    return [int(i) for i in np.asarray(batch["index"])]


def alone(root):
    """Each rank's batches per epoch, from its loader alone (no process group)."""
    out = []
    for rank in range(2):
        loader = headrace.Loader(pipeline(root), rank=rank, world_size=2)
        out.append([[indices(b) for b in loader] for _ in range(EPOCHS)])
        loader.close()
    return out


class Done:
    """A copy that has completed."""

    def query(self):
        return True

    def synchronize(self):
        pass


class CloneCopier:
    """The overlapped hand-off's path on the CPU: copies are clones, complete at once."""

    def copy(self, host):
        return {k: v if isinstance(v, list) else v.clone() for k, v in host.items()}, Done()

    def hand_over(self, tensors, ready):
        return None


def _rank(rank, root, out, even, overlapped):
    dist.init_process_group("gloo", init_method=f"file://{out}/rendezvous-{even}-{overlapped}",
                            rank=rank, world_size=2)
    loader = TorchLoader(pipeline(root), even_steps=None if even else False,
                         copier=CloneCopier() if overlapped else None, prefetch=2)
    seen, states = [], []
    for _ in range(EPOCHS):
        seen.append([[int(i) for i in b["index"]] for b in loader])
        states.append(loader.state_dict())
    stats = loader.stats()
    loader.close()
    Path(f"{out}/rank{rank}-{even}-{overlapped}.json").write_text(json.dumps(
        {"seen": seen, "states": states, "cut": stats["even_steps_cut_epochs"]}))
    dist.destroy_process_group()


def run(root, out, even, overlapped=False):
    mp.spawn(_rank, args=(str(root), str(out), even, overlapped), nprocs=2, join=True)
    return [json.loads((Path(out) / f"rank{r}-{even}-{overlapped}.json").read_text())
            for r in range(2)]


# overlapped: the device hand-off's loop (copies ahead of the batch handed out), which
# agrees on the batch it hands out, not on the ones copied ahead.
@pytest.mark.parametrize("overlapped", [False, True])
def test_ranks_step_equally_each_epoch_and_the_longer_one_is_cut(dataset, tmp_path, overlapped):
    want = alone(dataset)
    counts = [[len(epoch) for epoch in rank] for rank in want]
    assert counts[0][0] == counts[1][0], counts  # epoch 0: equal already
    assert counts[0][1] > counts[1][1], counts   # epoch 1: rank 0 has more
    assert counts[0][2] < counts[1][2], counts   # epoch 2: rank 1 has more

    ranks = run(dataset, tmp_path, even=True, overlapped=overlapped)
    for epoch in range(EPOCHS):
        n = min(counts[0][epoch], counts[1][epoch])
        for r in range(2):
            assert ranks[r]["seen"][epoch] == want[r][epoch][:n], (r, epoch)
    assert ranks[0]["cut"] == 1 and ranks[1]["cut"] == 1
    # Right after the cut of epoch 1, rank 0 stands at epoch 2's start.
    after = ranks[0]["states"][1]
    assert (after["epoch"], after["batch_in_epoch"]) == (2, 0)

    uneven = run(dataset, tmp_path, even=False, overlapped=overlapped)
    assert [[len(e) for e in r["seen"]] for r in uneven] == counts
