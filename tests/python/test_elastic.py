"""Elastic resume with real processes: W ranks (torch.distributed, gloo) each take k batches
of epoch 0 and save their state; merge_state_dicts makes one global state; W' new ranks load
it, finish epoch 0 and run epoch 1. Over epoch 0 every sample is delivered once (with
batch.pack, all but the tail the last round of W' ranks cannot fill), and epoch 1 is the
one a run started with W' ranks delivers. Also: a changed batch size, a state whose world
size cannot be met, and states taken at different steps."""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

import headrace

REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("HEADRACE_BIN", str(REPO / "build" / "headrace"))
N, B = 240, 4


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("elastic")
    subprocess.run([BIN, "make-sample", "--out", str(out), "--samples", str(N), "--size", "64x48",
                    "--seed", "4"], check=True, capture_output=True)
    return out


def pipeline(root, packed, batch_size=B):
    ops = headrace.ops
    return headrace.Pipeline(
        root / "manifest.jsonl",
        ops=[ops.decode(), ops.resize(shorter_side=32), ops.center_crop(24), ops.normalize(),
             ops.tokenize(root / "tokenizer.model", max_length=24, pad=not packed)],
        batch_size=batch_size, epochs=2, cpu_threads=1, seed=7, memory_budget="64MiB",
        pack={"seq_len": 64, "window": 3} if packed else None)


def indices(batch):
    return [int(i) for i in np.asarray(batch["index"])]


def _phase(rank, world, root, out, k):
    """One rank, packed and not (one process group for both: a process start costs more
    than the runs): with k, take k batches of epoch 0 and all-gather the states (rank 0
    writes them merged); without, load the merged state and run to the end."""
    dist.init_process_group("gloo", init_method=f"file://{out}/rendezvous-{world}",
                            rank=rank, world_size=world)
    for packed in (False, True):
        # rank and world size from torch.distributed
        loader = headrace.Loader(pipeline(Path(root), packed))
        assert (loader.rank, loader.world_size) == (rank, world)
        state_path = Path(out) / f"global-{packed}.json"
        seen = {}
        if k is not None:
            it = iter(loader)
            seen[0] = [i for _ in range(k) for i in indices(next(it))]
            states = [None] * world
            dist.all_gather_object(states, loader.state_dict())
            if rank == 0:
                state_path.write_text(json.dumps(headrace.merge_state_dicts(states)))
        else:
            loader.load_state_dict(json.loads(state_path.read_text()))
            for epoch in (0, 1):
                assert loader.epoch == epoch
                seen[epoch] = [i for batch in loader for i in indices(batch)]
        loader.close()
        Path(f"{out}/seen-{packed}-{world}-{rank}.json").write_text(json.dumps(seen))
        dist.barrier()
    dist.destroy_process_group()


def run_phase(world, root, out, k):
    mp.spawn(_phase, args=(world, str(root), str(out), k), nprocs=world, join=True)
    return {packed: [json.loads((out / f"seen-{packed}-{world}-{r}.json").read_text())
                     for r in range(world)] for packed in (False, True)}


@pytest.mark.parametrize("before,after,k", [(4, 3, 3), (2, 5, 5)])
def test_a_state_of_w_ranks_resumes_on_w_prime(dataset, tmp_path, before, after, k):
    firsts = run_phase(before, dataset, tmp_path, k)
    rests = run_phase(after, dataset, tmp_path, None)
    for packed in (False, True):
        first, rest = firsts[packed], rests[packed]
        state = json.loads((tmp_path / f"global-{packed}.json").read_text())
        assert state["kind"] == "global" and state["saved_world_size"] == before
        assert state["remainder"]["consumed"] == k * before * B
        epoch0 = [i for r in first for i in r["0"]] + [i for r in rest for i in r["0"]]
        assert len(epoch0) == len(set(epoch0)), f"a sample delivered twice (packed {packed})"
        # The rest of the epoch: the packers' waiting samples, then the order after the
        # position; dealt in rounds of W' batches, the last incomplete round dropped.
        left = len(state["remainder"]["pending"]) + N - state["remainder"]["consumed"]
        rounds = -(-left // B) // after
        assert N - len(epoch0) == left - min(left, rounds * after * B), packed
        if not packed:
            assert len(state["remainder"]["pending"]) == 0
            assert sorted(epoch0) == list(range(N))  # these sizes leave no incomplete round
        else:
            assert len(state["remainder"]["pending"]) > 0  # the windows' samples carried over
        # Epoch 1 is what ranks of a run started with W' deliver.
        for r in range(after):
            fresh = headrace.Loader(pipeline(dataset, packed), rank=r, world_size=after)
            fresh.set_epoch(1)
            assert rest[r]["1"] == [i for batch in fresh for i in indices(batch)], (packed, r)
            fresh.close()


def test_a_changed_batch_size_resumes_the_rest_of_the_epoch(dataset):
    loader = headrace.Loader(pipeline(dataset, False), rank=0, world_size=1)
    it = iter(loader)
    seen = [i for _ in range(7) for i in indices(next(it))]
    state = loader.state_dict()
    loader.close()
    bigger = headrace.Loader(pipeline(dataset, False, batch_size=10), rank=0, world_size=1,
                             state_dict=state)
    # The rest of the epoch in batches of 10; the next epoch is a whole one of them.
    assert len(bigger) == -(-(N - 7 * B) // 10)
    rest = [i for batch in bigger for i in indices(batch)]
    assert sorted(seen + rest) == list(range(N))
    assert len(bigger) == N // 10
    bigger.close()


def test_unmeetable_and_inconsistent_states_are_config_errors(dataset):
    loaders = [headrace.Loader(pipeline(dataset, False), rank=r, world_size=2) for r in range(2)]
    iters = [iter(l) for l in loaders]
    for it in iters:
        for _ in range(29):  # 29 of the 30 batches each: 8 samples left
            next(it)
    states = [l.state_dict() for l in loaders]
    merged = headrace.merge_state_dicts(states)
    with pytest.raises(headrace.ConfigError, match="fewer than world_size 3"):
        list(headrace.Loader(pipeline(dataset, False), rank=0, world_size=3, state_dict=merged))
    next(iters[0])
    with pytest.raises(headrace.ConfigError, match="batch_in_epoch.*same step"):
        headrace.merge_state_dicts([loaders[0].state_dict(), states[1]])
    with pytest.raises(headrace.ConfigError, match=r"ranks \[0\] of world_size 2"):
        headrace.merge_state_dicts(states[:1])
    for l in loaders:
        l.close()
