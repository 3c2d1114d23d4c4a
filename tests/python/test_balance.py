"""batch.balance (issue 49): each data-parallel step's samples dealt over the ranks by what
they cost, so that no rank's step costs much more than the mean. Two ranks' loaders over
the shared sample dataset (cost: tokens): each step holds the same samples as the order's
deal, every rank its batch size, the costliest rank's tokens never above the order's and
lower over the epoch; a state dict resumes a balanced run where it was."""
import numpy as np
import pytest

import headrace
from headrace import ConfigError

EPOCHS = 2


def pipeline(root, balance=None):
    ops = headrace.ops
    return headrace.Pipeline(
        root / "manifest.jsonl",
        ops=[ops.tokenize(root / "tokenizer.model", pad=False, max_length=64)],
        batch_size=4, epochs=EPOCHS, seed=3, cpu_threads=1, balance=balance)


def run(root, balance, rank):
    """Rank `rank` of 2's batches: (indices, tokens) each."""
    with headrace.Loader(pipeline(root, balance), rank=rank, world_size=2) as loader:
        return [[(np.asarray(b["index"]).tolist(), int(np.asarray(b["input_ids"]).size))
                 for b in loader] for _ in range(EPOCHS)]


def test_each_step_holds_the_orders_samples_dealt_so_that_the_costliest_rank_costs_less(
        py_sample):
    ordered = [run(py_sample, None, r) for r in range(2)]
    dealt = [run(py_sample, "tokens", r) for r in range(2)]
    before = after = 0
    for epoch in range(EPOCHS):
        assert len(dealt[0][epoch]) == len(ordered[0][epoch]) == 6
        for step in range(6):
            ranks = [dealt[r][epoch][step] for r in range(2)]
            was = [ordered[r][epoch][step] for r in range(2)]
            assert [len(i) for i, _ in ranks] == [4, 4]
            assert sorted(ranks[0][0] + ranks[1][0]) == sorted(was[0][0] + was[1][0])
            assert max(t for _, t in ranks) <= max(t for _, t in was)
            before += max(t for _, t in was)
            after += max(t for _, t in ranks)
    assert after < before


def test_a_balanced_run_resumes_from_its_state_dict(py_sample):
    with headrace.Loader(pipeline(py_sample, "tokens"), rank=1, world_size=2) as loader:
        it = iter(loader)
        taken = [np.asarray(next(it)["index"]).tolist() for _ in range(2)]
        state = loader.state_dict()
        rest = [np.asarray(next(it)["index"]).tolist() for _ in range(4)]
        with pytest.raises(StopIteration):  # the epoch's 6 batches
            next(it)
    with headrace.Loader(pipeline(py_sample, "tokens"), rank=1, world_size=2,
                         state_dict=state) as resumed:
        assert [np.asarray(b["index"]).tolist() for b in resumed] == rest
    # ... a run that the deal changed (else this would test the order's resume only)
    assert taken + rest != [indices for indices, _ in run(py_sample, None, 1)[0]]


def test_a_cost_that_is_none_is_refused_naming_the_key(py_sample):
    with pytest.raises(ConfigError, match=r"batch\.balance\.cost.*tokens, flops, qwen2_vl"):
        headrace.Loader(pipeline(py_sample, "qwen9"))
