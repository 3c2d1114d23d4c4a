"""Epochs and ranks the way PyTorch training loops use them: one epoch per `for`,
set_epoch, len(), resume mid-epoch, prefetch across epochs, rank defaults, Ctrl-C."""
import os
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import headrace
from headrace import ops

PER_EPOCH = 6  # 48 samples, batch 8


def indices(batch):
    return [int(i) for i in np.asarray(batch["index"])]


def epoch_orders(loader, epochs):
    """[(epoch of the batches, [sample indices in order])] for `epochs` for-loops."""
    out = []
    for _ in range(epochs):
        seen = [(b.epoch, indices(b)) for b in loader]
        assert len({e for e, _ in seen}) == 1, seen
        out.append((seen[0][0], [i for _, idx in seen for i in idx]))
    return out


def test_each_for_is_the_next_epoch_with_its_own_shuffle(make_pipeline):
    loader = headrace.Loader(make_pipeline())
    assert len(loader) == PER_EPOCH
    orders = epoch_orders(loader, 3)
    assert [e for e, _ in orders] == [0, 1, 2]
    for _, order in orders:
        assert sorted(order) == list(range(48))  # every sample once per epoch
    assert len({tuple(order) for _, order in orders}) == 3  # a new order each epoch
    # The same epochs from a fresh loader: the order is a function of (seed, epoch).
    assert epoch_orders(headrace.Loader(make_pipeline()), 3) == orders


def test_augmentation_seeds_change_with_the_epoch(make_pipeline):
    # flip(p=0.5) decides per (seed, epoch, index): sample 0 is flipped in some epochs and
    # not in others, so its pixels differ between at least two of 6 epochs.
    loader = headrace.Loader(make_pipeline(shuffle=False, extra_ops=[ops.flip(p=0.5)]))
    first_rows = []
    for _ in range(6):
        batch = next(iter(loader))
        assert indices(batch)[0] == 0
        first_rows.append(np.asarray(batch["image"])[0].tobytes())
    assert len(set(first_rows)) == 2


def test_break_leaves_the_epoch_and_the_next_for_starts_the_next(make_pipeline):
    loader = headrace.Loader(make_pipeline())
    full = epoch_orders(headrace.Loader(make_pipeline()), 3)
    for batch in loader:
        assert batch.epoch == 0
        break
    got = [(b.epoch, b.index) for b in loader]
    assert got == [(1, k) for k in range(PER_EPOCH)]
    assert epoch_orders(loader, 1) == [full[2]]


def test_iter_again_before_a_batch_is_the_same_epoch(make_pipeline):
    # CPython 3.13.5's generator expressions call iter() twice on their outermost iterable
    # (3.13.0's once): the second, before any batch was taken, is the same `for`.
    loader = headrace.Loader(make_pipeline())
    full = epoch_orders(headrace.Loader(make_pipeline()), 2)
    it = iter(iter(loader))
    assert [(b.epoch, i) for b in it for i in indices(b)] == [(0, i) for i in full[0][1]]
    assert sum(1 for b in iter(loader) if b.epoch == 1) == PER_EPOCH
    # After a batch, iter() is a new `for`: the next epoch (test_break_... above).
    next(iter(loader))
    assert next(iter(loader)).epoch == 3


def test_set_epoch_jumps_and_keeps_a_resumed_position(make_pipeline):
    full = epoch_orders(headrace.Loader(make_pipeline()), 5)
    loader = headrace.Loader(make_pipeline())
    loader.set_epoch(4)
    assert epoch_orders(loader, 1) == [full[4]]
    loader.set_epoch(2)
    assert epoch_orders(loader, 1) == [full[2]]
    # set_epoch with the epoch the next `for` starts anyway changes nothing.
    loader.set_epoch(3)
    assert epoch_orders(loader, 1) == [full[3]]
    # After a resume mid-epoch, set_epoch(that epoch) keeps the position.
    it = iter(loader)
    [next(it) for _ in range(2)]  # epoch 4, batches 0 and 1
    state = loader.state_dict()
    resumed = headrace.Loader(make_pipeline(), state_dict=state)
    resumed.set_epoch(4)
    assert [b.index for b in resumed] == list(range(2, PER_EPOCH))
    assert resumed.epoch == 5


def test_state_dict_mid_epoch_continues_that_epoch_then_the_next(make_pipeline):
    loader = headrace.Loader(make_pipeline())
    full = epoch_orders(headrace.Loader(make_pipeline()), 3)
    epoch_orders(loader, 1)  # epoch 0
    it = iter(loader)
    taken = [next(it) for _ in range(4)]  # epoch 1, batches 0..3
    state = loader.state_dict()
    assert (state["epoch"], state["batch_in_epoch"]) == (1, 4)
    assert state["batches_per_epoch"] == PER_EPOCH
    resumed = headrace.Loader(make_pipeline(cpu_threads=1, prefetch=2), state_dict=state)
    rest = [indices(b) for b in resumed]
    assert [i for b in taken for i in indices(b)] + [i for r in rest for i in r] == full[1][1]
    assert epoch_orders(resumed, 1) == [full[2]]


def test_prefetch_crosses_the_epoch_boundary(make_pipeline):
    # A Python op tells when the engine starts on epoch 1. The consumer finishes epoch 0
    # and then, before asking for anything, waits for that: the engine got there on its
    # own. Without prefetch across epochs the wait below would time out.
    started = threading.Event()

    def mark(sample):
        if sample["epoch"] == 1:
            started.set()
        return {"e": np.array([sample["epoch"]], dtype=np.int32)}

    loader = headrace.Loader(make_pipeline(extra_ops=[ops.map(mark, {"e": ("i32", [1])})],
                                           prefetch=2))
    assert [b.epoch for b in loader] == [0] * PER_EPOCH
    assert started.wait(timeout=120), "the engine did not start epoch 1 before it was asked"
    batches = list(loader)
    assert [b.epoch for b in batches] == [1] * PER_EPOCH
    # One engine served both epochs: its consumer counters carry on.
    assert loader.stats()["batches"] == 2 * PER_EPOCH


def test_the_run_limit_and_run(make_pipeline):
    loader = headrace.Loader(make_pipeline(epochs=2))
    assert [b.epoch for b in loader.run()] == [0] * PER_EPOCH + [1] * PER_EPOCH
    with pytest.raises(headrace.ConfigError, match=r"epoch 2 is outside the run.*\[0, 2\)"):
        iter(loader)
    limited = headrace.Loader(make_pipeline(epochs=2))
    epoch_orders(limited, 2)
    with pytest.raises(headrace.ConfigError, match=r"epochs is 2"):
        for _ in limited:
            pass


@pytest.mark.parametrize("epoch, allowed", [(-1, r"\[0, 3\)"), (3, r"\[0, 3\)")])
def test_set_epoch_outside_the_run_names_the_range(make_pipeline, epoch, allowed):
    loader = headrace.Loader(make_pipeline(epochs=3))
    with pytest.raises(headrace.ConfigError, match=rf"set_epoch: epoch {epoch} .*{allowed}"):
        loader.set_epoch(epoch)
    unbounded = headrace.Loader(make_pipeline())
    unbounded.set_epoch(1000)
    with pytest.raises(headrace.ConfigError, match=r"allowed: >= 0"):
        unbounded.set_epoch(-1)


def test_a_state_dict_from_before_epochs_is_refused(make_pipeline):
    loader = headrace.Loader(make_pipeline())
    old = dict(loader.state_dict(), version=1, next_batch=7)
    for key in ("epoch", "batch_in_epoch", "batches_per_epoch"):
        del old[key]
    with pytest.raises(headrace.ConfigError,
                       match=r"version: saved 1, this loader 2.*next_batch 7"):
        headrace.Loader(make_pipeline(), state_dict=old)


def test_rank_and_world_size_come_from_the_environment(make_pipeline, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    loader = headrace.Loader(make_pipeline())
    assert (loader.rank, loader.world_size) == (1, 2)
    assert len(loader) == PER_EPOCH // 2
    assert all(b.index % 2 == 1 for b in loader)
    explicit = headrace.Loader(make_pipeline(), rank=0, world_size=1)
    assert (explicit.rank, explicit.world_size) == (0, 1)
    assert headrace.Loader(make_pipeline(), rank=0).world_size == 2


@pytest.mark.parametrize("env, message", [
    ({"RANK": "2", "WORLD_SIZE": "2"},
     r"RANK='2', WORLD_SIZE='2'.*RANK must be in \[0, WORLD_SIZE\)"),
    ({"RANK": "0"}, r"RANK='0', WORLD_SIZE=None.*set both"),
    ({"WORLD_SIZE": "4"}, r"RANK=None, WORLD_SIZE='4'.*set both"),
    ({"RANK": "a", "WORLD_SIZE": "2"}, r"RANK='a', WORLD_SIZE='2'.*integers"),
])
def test_rank_and_world_size_that_disagree_are_named(make_pipeline, monkeypatch, env, message):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(headrace.ConfigError, match=message):
        headrace.Loader(make_pipeline())


def test_rank_and_world_size_come_from_torch_distributed(make_pipeline, tmp_path, monkeypatch):
    import torch.distributed as dist
    monkeypatch.setenv("RANK", "5")  # torch.distributed, once initialized, wins over these
    monkeypatch.setenv("WORLD_SIZE", "9")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0,
                            world_size=1)
    try:
        loader = headrace.Loader(make_pipeline())
        assert (loader.rank, loader.world_size) == (0, 1)
    finally:
        dist.destroy_process_group()


CTRL_C_CHILD = textwrap.dedent("""
    import sys, threading
    from pathlib import Path
    import numpy as np
    sys.path.insert(0, {tests!r})
    from conftest import small_pipeline
    import headrace
    gate = threading.Event()
    waiting = threading.Event()
    def stall(sample):  # a source that does not answer
        # The engine may call this while the Loader is still being built: say "stalled"
        # only once the main thread is in the try below, so that the SIGINT cannot land
        # outside it (an uncaught KeyboardInterrupt, then an exit that waits for this op).
        waiting.wait(300)
        print("stalled", flush=True)
        gate.wait(300)
        return {{"x": np.zeros(1, np.float32)}}
    loader = headrace.Loader(small_pipeline(Path({data!r}), cpu_threads=1, extra_ops=[
        headrace.ops.map(stall, {{"x": ("f32", [1])}})]))
    try:
        batches = iter(loader)
        waiting.set()
        next(batches)
        print("no interrupt", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    gate.set()
    loader.close()
""")


def test_ctrl_c_interrupts_a_loop_waiting_for_a_batch(py_sample):
    child = subprocess.Popen(
        [sys.executable, "-c", CTRL_C_CHILD.format(tests=os.path.dirname(__file__),
                                                   data=str(py_sample))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # A parent that ignores SIGINT (a job started in the background, as a CI runner may
        # start `make test`) would pass that on, and Python then installs no handler.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert child.stdout.readline().strip() == "stalled"  # the engine is stuck; next() waits
        child.send_signal(signal.SIGINT)
        # Before the fix the wait ended only when the stalled op did (300 s).
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert "interrupted" in out, err
    assert child.returncode == 0, err
