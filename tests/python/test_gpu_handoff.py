"""The GPU hand-off's buffer lifetimes, on the CPU: a copier whose copies complete only
when the test says so stands in for the CUDA stream (tests/gpu/check.py runs the real
one on a GPU machine)."""
import pytest
import torch

import headrace.torch as ht


class GatedEvent:
    """A copy's completion event that completes when the test opens it."""

    def __init__(self, done=False):
        self.done = done

    def query(self):
        return self.done

    def synchronize(self):
        self.done = True  # waiting for a copy: it completes


class GatedCopier:
    """copy() takes a copy of the host tensors at once (what the DMA would read) and
    returns an event the test controls; records each host batch's addresses."""

    def __init__(self, complete_at_once=False):
        self.complete_at_once = complete_at_once
        self.events = []
        self.host_ptrs = []
        self.handed = 0

    def copy(self, host):
        self.host_ptrs.append(host["image"].data_ptr())
        event = GatedEvent(self.complete_at_once)
        self.events.append(event)
        return {k: v if isinstance(v, list) else v.clone() for k, v in host.items()}, event

    def hand_over(self, tensors, ready):
        self.handed += 1
        return None


def reference_batches(make_pipeline, epochs):
    loader = ht.TorchLoader(make_pipeline(epochs=epochs))
    return [[b["image"].clone() for b in loader] for _ in range(epochs)]


def test_a_host_batch_is_not_reused_before_its_copy_completes(make_pipeline):
    copier = GatedCopier()
    loader = ht.TorchLoader(make_pipeline(epochs=5), copier=copier, prefetch=2)
    expected = reference_batches(make_pipeline, 5)
    for epoch in range(3):
        got = [b["image"] for b in loader]
        assert len(got) == 6
        for a, b in zip(got, expected[epoch]):
            assert torch.equal(a, b)
    # No copy completed: every host batch is still held, so the engine's pool could
    # hand none of their memory to a later batch.
    assert len(copier.host_ptrs) == 18
    assert len(set(copier.host_ptrs)) == 18
    assert loader.stats()["host_batches_held"] == 18
    # The copies complete: the host batches go back to the pool, which reuses them.
    for event in copier.events:
        event.done = True
    assert loader.stats()["host_batches_held"] == 0
    copier.complete_at_once = True
    # Two epochs more: the engine may have taken the next epoch's batches (its prefetch and
    # the loader's, up to 6) before the copies completed; the ones after come from the pool.
    for epoch in (3, 4):
        got = [b["image"] for b in loader]
        for a, b in zip(got, expected[epoch]):
            assert torch.equal(a, b)
    # The pool does reuse host batches once their copies complete (so the 18 distinct ones
    # above were held, not merely fresh): the released ones, or, when under load the
    # engine had taken those batches ahead and the pool had let them go, one another's.
    later = copier.host_ptrs[18:]
    assert set(later) & set(copier.host_ptrs[:18]) or len(set(later)) < len(later), \
        "host batches were never reused: the test could not see a premature reuse"
    loader.close()


def test_only_completed_copies_release_their_batches_oldest_first(make_pipeline):
    copier = GatedCopier()
    loader = ht.TorchLoader(make_pipeline(epochs=1), copier=copier, prefetch=2)
    it = iter(loader)
    next(it)
    # Batch 0 is handed out, 1 and 2 are being copied ahead of it.
    assert len(copier.events) == 3 and copier.handed == 1
    assert loader.stats()["host_batches_held"] == 3
    copier.events[1].done = True  # a later copy cannot complete before an earlier one
    assert loader.stats()["host_batches_held"] == 3
    copier.events[0].done = True
    assert loader.stats()["host_batches_held"] == 1
    next(it)
    assert len(copier.events) == 4  # batch 3 is copied while the trainer has batch 1
    for event in copier.events:
        event.done = True
    assert loader.stats()["host_batches_held"] == 0
    loader.close()


def test_a_checkpoint_resumes_after_the_batch_handed_out_not_the_ones_copied_ahead(
        make_pipeline):
    expected = reference_batches(make_pipeline, 2)
    loader = ht.TorchLoader(make_pipeline(epochs=2), copier=GatedCopier(True), prefetch=3)
    it = iter(loader)
    for _ in range(2):
        next(it)
    state = loader.state_dict()
    assert (state["epoch"], state["batch_in_epoch"]) == (0, 2)
    loader.close()
    resumed = ht.TorchLoader(make_pipeline(epochs=2), copier=GatedCopier(True), prefetch=3)
    resumed.load_state_dict(state)
    rest = [b["image"] for b in resumed]
    assert len(rest) == 4
    for a, b in zip(rest, expected[0][2:]):
        assert torch.equal(a, b)
    assert resumed.state_dict()["epoch"] == 1  # the epoch ended: the next one comes
    nxt = [b["image"] for b in resumed]
    assert all(torch.equal(a, b) for a, b in zip(nxt, expected[1]))
    resumed.close()


def test_close_waits_for_copies_still_reading_host_batches(make_pipeline):
    copier = GatedCopier()
    loader = ht.TorchLoader(make_pipeline(epochs=1), copier=copier, prefetch=2)
    for _ in loader:
        break
    assert loader.stats()["host_batches_held"] == 3
    loader.close()  # synchronizes each copy's event before dropping its batch
    assert all(e.done for e in copier.events)
    assert loader.stats()["host_batches_held"] == 0


@pytest.mark.parametrize("prefetch", [-1, 1.5, True])
def test_prefetch_must_be_a_count(make_pipeline, prefetch):
    with pytest.raises(ValueError, match="prefetch must be an int >= 0"):
        ht.TorchLoader(make_pipeline(), prefetch=prefetch)
