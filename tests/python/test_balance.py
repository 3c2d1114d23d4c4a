"""batch.balance (issue 49): each data-parallel step's samples dealt over the ranks by what
they cost, so that no rank's step costs much more than the mean. Two ranks' loaders over
the shared sample dataset (cost: tokens): each step holds the same samples as the order's
deal, every rank its batch size, the costliest rank's tokens never above the order's and
lower over the epoch; a state dict resumes a balanced run where it was; a size index
(`headrace index sizes`) deals the same steps, and one built for another pipeline, or cut
short, is refused saying what to run."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import headrace
from conftest import rest_of_epoch
from headrace import ConfigError

EPOCHS = 2
REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("HEADRACE_BIN", str(REPO / "build" / "headrace"))


def pipeline(root, balance=None, max_length=64):
    ops = headrace.ops
    return headrace.Pipeline(
        root / "manifest.jsonl",
        ops=[ops.tokenize(root / "tokenizer.model", pad=False, max_length=max_length)],
        batch_size=4, epochs=EPOCHS, seed=3, cpu_threads=1, balance=balance)


def run(root, balance, rank, seen=None):
    """Rank `rank` of 2's batches: (indices, tokens) each; `seen` gets the loader's stats
    and the report's "balance" section as the run ended."""
    with headrace.Loader(pipeline(root, balance), rank=rank, world_size=2) as loader:
        out = [[(np.asarray(b["index"]).tolist(), int(np.asarray(b["input_ids"]).size))
                for b in loader] for _ in range(EPOCHS)]
        if seen is not None:
            seen.update(stats=loader.stats(), report=loader.report().get("balance"))
        return out


def test_each_step_holds_the_orders_samples_dealt_so_that_the_costliest_rank_costs_less(
        py_sample):
    ordered = [run(py_sample, None, r) for r in range(2)]
    seen = [{} for _ in range(2)]
    dealt = [run(py_sample, "tokens", r, seen[r]) for r in range(2)]
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
    # Each rank's stats and report: the steps it dealt (each the whole step's costs, the
    # same on both ranks), the slowest rank's tokens summed as balanced and as ordered.
    for rank in range(2):
        report, stats = seen[rank]["report"], seen[rank]["stats"]
        assert report["steps"] == stats["balance.steps"] == 6 * EPOCHS
        assert report["slowest_rank_cost"] == stats["balance.slowest_rank_cost"] == after
        assert report["slowest_rank_cost_order"] == before
        assert report["idle_ratio"] < report["idle_ratio_order"]
        assert report["untold"] == 0
        assert report["short_ranks"] == stats["balance.short_ranks"] == 0  # none required
    assert run(py_sample, None, 0, seen[0]) and seen[0]["report"] is None


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


def build_index(root, tmp_path, **kw):
    """`headrace index sizes` over pipeline(root)'s config; returns the index's path."""
    config = tmp_path / "balance.yaml"
    config.write_text(pipeline(root, "tokens", **kw).to_yaml())
    out = tmp_path / "sizes.idx"
    proc = subprocess.run([BIN, "index", "sizes", str(config), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "48 samples (0 not told" in proc.stdout
    return out


def test_with_a_size_index_the_ranks_get_the_same_batches(py_sample, tmp_path):
    index = build_index(py_sample, tmp_path)
    balance = {"cost": "tokens", "index": str(index)}
    assert [run(py_sample, balance, r) for r in range(2)] == \
        [run(py_sample, "tokens", r) for r in range(2)]


def test_python_builds_the_index_the_cli_builds_byte_for_byte(py_sample, tmp_path):
    cli = build_index(py_sample, tmp_path)
    out = tmp_path / "python.idx"
    summary = headrace.build_size_index(pipeline(py_sample, "tokens"), out, threads=2)
    assert (summary["samples"], summary["untold"]) == (48, 0)
    assert out.read_bytes() == cli.read_bytes()
    # Where the config says, by default; nowhere said is refused before any work.
    into = tmp_path / "default.idx"
    assert headrace.build_size_index(
        pipeline(py_sample, {"cost": "tokens", "index": str(into)}))["path"] == str(into)
    assert into.read_bytes() == cli.read_bytes()
    with pytest.raises(ConfigError, match=r"out=PATH or set batch\.balance\.index"):
        headrace.build_size_index(pipeline(py_sample, "tokens"))


def test_a_planned_pack_plans_by_the_index_as_it_would_by_sizing(py_sample, tmp_path):
    """batch.pack.index: a planned pack's rows from the size index (its driver sizes only
    the samples longer than seq_len), the batches those of the run that sizes each
    sample; an index of another pipeline is refused under the key given."""
    index = build_index(py_sample, tmp_path)

    def packed(**pack):
        ops = headrace.ops
        return headrace.Pipeline(
            py_sample / "manifest.jsonl",
            ops=[ops.tokenize(py_sample / "tokenizer.model", pad=False, max_length=64)],
            batch_size=4, epochs=EPOCHS, seed=3, cpu_threads=1,
            pack={"seq_len": 40, "window": 4, **pack},
            overrides={"errors.max_error_rate": 1})  # the cuts count, and the run goes on

    def digests(spec):
        with headrace.Loader(spec, rank=1, world_size=2) as loader:
            return [[(np.asarray(b["index"]).tolist(), np.asarray(b["input_ids"]).tobytes(),
                      np.asarray(b["cu_seqlens"]).tolist()) for b in loader]
                    for _ in range(EPOCHS)]

    sized = digests(packed())
    assert any(len(indices) > 1 for epoch in sized for indices, _, _ in epoch), "rows share"
    assert digests(packed(index=str(index))) == sized
    other = build_index(py_sample, tmp_path, max_length=32)
    with pytest.raises(ConfigError, match=r"batch\.pack\.index: .*another pipeline"):
        next(iter(headrace.Loader(packed(index=str(other)))))


def test_a_sample_changed_since_its_index_was_built_is_delivered_as_it_is_and_counted(
        py_sample, tmp_path):
    """A size index plans the run; a sample whose data changed since (its text here) is
    delivered with its real tokens, counted in stats() and named in the report."""
    root = tmp_path / "data"
    shutil.copytree(py_sample, root)
    index = build_index(root, tmp_path)
    manifest = root / "manifest.jsonl"
    lines = manifest.read_text().splitlines()
    record = json.loads(lines[5])
    record["conversations"][1]["value"] = "No."
    lines[5] = json.dumps(record)
    manifest.write_text("\n".join(lines) + "\n")

    def tokens_of_5(balance):
        """Sample 5's tokens as delivered, and the stats and report of the rank that had it."""
        for rank in range(2):
            with headrace.Loader(pipeline(root, balance), rank=rank, world_size=2) as loader:
                found = None
                for b in (b for _ in range(EPOCHS) for b in loader):
                    at = np.asarray(b["index"]).tolist()
                    if 5 in at:
                        ids = np.asarray(b["input_ids"])
                        lengths = np.asarray(b["input_ids_lengths"]).tolist()
                        start = sum(lengths[:at.index(5)])
                        found = ids[start:start + lengths[at.index(5)]].tobytes()
                if found is not None:
                    return found, loader.stats(), loader.report()
        raise AssertionError("no rank delivered sample 5")

    real, stats, report = tokens_of_5({"cost": "tokens", "index": str(index)})
    assert real == tokens_of_5("tokens")[0], "the batch holds the sample's real tokens"
    assert stats["size_index.stale"] >= 1  # each time it ran on this rank
    assert report["size_index"]["stale"] == stats["size_index.stale"]
    assert "index 5," in report["size_index"]["first_stale"]
    assert "size_index.stale" not in tokens_of_5("tokens")[1]


def test_an_index_of_another_pipeline_or_cut_short_is_refused_saying_what_to_run(
        py_sample, tmp_path):
    index = build_index(py_sample, tmp_path, max_length=32)  # other sizes
    with pytest.raises(ConfigError, match=r"batch\.balance\.index: .*another pipeline.*"
                                          r"headrace index sizes CONFIG --out"):
        next(iter(headrace.Loader(pipeline(py_sample, {"cost": "tokens", "index": str(index)}))))
    index.write_bytes(index.read_bytes()[:-5])
    with pytest.raises(ConfigError, match=r"batch\.balance\.index: .*not a whole size index"):
        next(iter(headrace.Loader(pipeline(py_sample, {"cost": "tokens", "index": str(index)}))))


def packed_balance(root, world_rows=None):
    ops = headrace.ops
    return headrace.Pipeline(
        root / "manifest.jsonl",
        ops=[ops.tokenize(root / "tokenizer.model", pad=False, max_length=64)],
        batch_size=4, epochs=EPOCHS, seed=3, cpu_threads=1, balance="tokens",
        pack={"seq_len": 96, "window": 4})


def test_a_balanced_pack_with_a_window_deals_each_steps_rows_and_resumes_elastically(
        py_sample):
    """With a packing window a rank's packer would carry what its rows cannot hold into its
    later steps and undo a deal of samples: each step's rows are planned over both ranks'
    samples (one window, held alike in both ranks' states) and the rows dealt by cost.
    Every sample is delivered once an epoch; both ranks hold as many rows each step; a
    rank resumes from its state; the two states merge (the window once) into a state a
    world of one finishes the epoch from, each sample once, and a world of three too
    (its rows dealt again)."""
    loaders = [headrace.Loader(packed_balance(py_sample), rank=r, world_size=2) for r in range(2)]
    its = [iter(loader) for loader in loaders]
    taken, states, rest = [[], []], [], [[], []]
    for r in range(2):
        taken[r] = [digest(next(its[r])) for _ in range(2)]
        states.append(loaders[r].state_dict())
        rest[r] = rest_of_epoch(its[r], digest)  # the rest of epoch 0
    for loader in loaders:
        loader.close()
    assert states[0]["pack"]["shared"] is True
    assert states[0]["pack"]["waiting"] == states[1]["pack"]["waiting"]
    assert states[0]["pack"]["waiting"], "the window holds samples at step 2"
    epoch0 = [taken[r] + rest[r] for r in range(2)]
    assert len(epoch0[0]) == len(epoch0[1]) == 6
    every = sorted(i for r in range(2) for indices, _ in epoch0[r] for i in indices)
    assert every == list(range(48)), "each sample once over the two ranks' rows"
    rows = [[n for _, n in epoch0[r]] for r in range(2)]
    assert rows[0][:-1] == rows[1][:-1], "as many rows each step (but the epoch's last)"
    # A rank resumed from its state: the rest of the unbroken run.
    with headrace.Loader(packed_balance(py_sample), rank=1, world_size=2,
                         state_dict=states[1]) as resumed:
        assert rest_of_epoch(iter(resumed), digest) == rest[1]
    # Elastic: the ranks' states merged (their window once), finished by one rank.
    merged = headrace.merge_state_dicts(states)
    with headrace.Loader(packed_balance(py_sample), rank=0, world_size=1) as alone:
        alone.load_state_dict(merged)
        finished = [i for indices, _ in rest_of_epoch(iter(alone), digest) for i in indices]
    before = [i for r in range(2) for indices, _ in taken[r] for i in indices]
    assert sorted(before + finished) == list(range(48))
    # ... and by three ranks, whose rows are dealt again: each sample at most once, all
    # but the tail no round of three ranks' batches fills; as many rows a step.
    thirds = []
    for rank in range(3):
        with headrace.Loader(packed_balance(py_sample), rank=rank, world_size=3) as loader:
            loader.load_state_dict(merged)
            thirds.append(rest_of_epoch(iter(loader), digest))
    assert [n for _, n in thirds[0]] == [n for _, n in thirds[1]] == [n for _, n in thirds[2]]
    resumed = before + [i for rank in thirds for indices, _ in rank for i in indices]
    assert len(resumed) == len(set(resumed)) and 48 - len(resumed) < 3 * 4
    # States that disagree about the window are refused.
    states[1]["pack"]["waiting"] = states[1]["pack"]["waiting"][1:]
    with pytest.raises(ConfigError, match=r"shared pack window differs"):
        headrace.merge_state_dicts(states)


def digest(batch):
    """A packed batch's samples and rows."""
    return np.asarray(batch["index"]).tolist(), np.asarray(batch["input_ids"]).shape[0]

