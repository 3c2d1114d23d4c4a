"""`headrace which` (issue 49): from the plan alone, the samples of a rank's batch of a
data-parallel step, and where a sample lands. Checked against the `index` field of what
two ranks' Python loaders deliver, in the epoch's order and dealt by batch.balance, and
its error messages."""
import json

import numpy as np
import pytest

import headrace
from e2e_util import run_headrace

WORLD = 2
STEPS = 6  # 48 samples in batches of 4: 12 batches, 6 steps of 2 ranks


def write_config(path, dataset, extra=""):
    """Shuffled, two epochs, text tokenized unpadded (what batch.balance costs by)."""
    path.write_text(f"""
source: {{manifest: {dataset / 'manifest.jsonl'}}}
seed: 3
epochs: 2
shuffle: true
batch: {{size: 4{extra}}}
ops:
  - text.tokenize: {{model: {dataset / 'tokenizer.model'}, max_length: 64, pad: false}}
execution: {{cpu_threads: 1}}
""")
    return path


@pytest.fixture(scope="module")
def configs(sample_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("which")
    return {"ordered": write_config(out / "ordered.yaml", sample_dir),
            "dealt": write_config(out / "dealt.yaml", sample_dir, ", balance: {cost: tokens}"),
            "packed": write_config(out / "packed.yaml", sample_dir, ", pack: {seq_len: 256}"),
            "rows": write_config(out / "rows.yaml", sample_dir,
                                 ", pack: {seq_len: 96, window: 4}, balance: {cost: tokens}")}


def delivered(config):
    """Each rank's batches' dataset indices, per epoch: [rank][epoch][step]."""
    out = []
    for rank in range(WORLD):
        with headrace.Loader(str(config), rank=rank, world_size=WORLD) as loader:
            out.append([[np.asarray(b["index"]).tolist() for b in loader] for _ in range(2)])
    return out


def which(binary, config, *args):
    proc = run_headrace(binary, "which", config, "--world-size", WORLD, *args, "--json")
    return json.loads(proc.stdout)


def manifest_ids(dataset):
    lines = (dataset / "manifest.jsonl").read_text().splitlines()
    return [json.loads(line)["id"] for line in lines]


@pytest.mark.parametrize("deal", ["ordered", "dealt"])
def test_a_steps_listing_is_what_the_ranks_loader_delivers(headrace_bin, sample_dir, configs,
                                                           deal):
    batches = delivered(configs[deal])
    ids = manifest_ids(sample_dir)
    for epoch in range(2):
        for rank in range(WORLD):
            assert len(batches[rank][epoch]) == STEPS
            for step in range(STEPS):
                got = which(headrace_bin, configs[deal], "--step", step, "--rank", rank,
                            "--epoch", epoch)
                assert (got["deal"], got["steps"], got["packed"]) == (deal, STEPS, False)
                assert (got["epoch"], got["step"], got["rank"]) == (epoch, step, rank)
                assert [s["index"] for s in got["samples"]] == batches[rank][epoch][step], \
                    (epoch, step, rank)
                for s in got["samples"]:
                    assert s["id"] == ids[s["index"]]
                    assert [m["field"] for m in s["media"]] == ["image"]
                    assert s["media"][0]["uri"].endswith(f"images/{ids[s['index']]}.jpg")


def test_the_balanced_deal_is_not_the_orders(configs):
    # Else the "dealt" case above would check the order's deal twice.
    assert delivered(configs["dealt"]) != delivered(configs["ordered"])


@pytest.mark.parametrize("deal", ["ordered", "dealt"])
def test_a_sample_lands_where_the_loader_delivers_it(headrace_bin, sample_dir, configs, deal):
    batches = delivered(configs[deal])
    ids = manifest_ids(sample_dir)
    epoch = 1
    for rank in range(WORLD):
        for step, indices in enumerate(batches[rank][epoch]):
            for position, index in enumerate(indices):
                got = which(headrace_bin, configs[deal], "--sample", ids[index], "--epoch", epoch)
                assert got["id"] == ids[index] and got["deal"] == deal
                assert got["lands"] == [{"index": index, "step": step, "rank": rank,
                                         "position": position, "batch_samples": len(indices)}]


def test_with_rows_dealt_a_listing_is_the_ranks_packed_batch_and_a_sample_lands_there(
        headrace_bin, sample_dir, configs):
    """batch.balance with a packing window deals each step's rows (planned over both
    ranks' samples): `which` lists the packed batch's samples in row order, and a sample
    lands at the step and rank whose packed batch holds it, a later step than the
    order's for some."""
    batches = delivered(configs["rows"])
    ids = manifest_ids(sample_dir)
    epoch = 1
    for rank in range(WORLD):
        for step in range(STEPS):
            got = which(headrace_bin, configs["rows"], "--step", step, "--rank", rank,
                        "--epoch", epoch)
            assert got["packed"] is True and "rows' samples" in got["note"]
            assert [s["index"] for s in got["samples"]] == batches[rank][epoch][step]
    ordered = delivered(configs["ordered"])
    order_step = {i: step for r in range(WORLD) for step, b in enumerate(ordered[r][epoch])
                  for i in b}
    assert any(step > order_step[i] for r in range(WORLD)
               for step, b in enumerate(batches[r][epoch]) for i in b), "a window carries"
    for rank, step in ((0, 0), (1, STEPS - 1)):
        for position, index in enumerate(batches[rank][epoch][step]):
            got = which(headrace_bin, configs["rows"], "--sample", ids[index], "--epoch", epoch)
            assert got["lands"] == [{"index": index, "step": step, "rank": rank,
                                     "position": position,
                                     "batch_samples": len(batches[rank][epoch][step])}]


def test_the_table_says_how_the_step_is_dealt_and_that_packing_lists_the_input_batch(
        headrace_bin, configs):
    ordered = run_headrace(headrace_bin, "which", configs["ordered"], "--step", 1, "--rank", 0)
    assert "step 1 of 12, rank 0 of 1: 4 samples, as the epoch's order deals them" in ordered.stdout
    dealt = run_headrace(headrace_bin, "which", configs["dealt"], "--step", 1, "--rank", 1,
                         "--world-size", 2)
    assert "rank 1 of 2: 4 samples, dealt by batch.balance (cost tokens)" in dealt.stdout
    packed = run_headrace(headrace_bin, "which", configs["packed"], "--step", 1, "--rank", 1,
                          "--world-size", 2)
    assert "the input batch's samples; a packing window > 0 may carry" in packed.stdout
    got = which(headrace_bin, configs["packed"], "--step", 1, "--rank", 1)
    assert got["packed"] is True and "packing window" in got["note"]
    assert got["samples"] == which(headrace_bin, configs["ordered"], "--step", 1,
                                   "--rank", 1)["samples"]


def test_with_a_size_index_the_deal_listed_is_the_same(headrace_bin, sample_dir, configs,
                                                       tmp_path):
    index = tmp_path / "sizes.idx"
    run_headrace(headrace_bin, "index", "sizes", configs["dealt"], "--out", index)
    indexed = write_config(tmp_path / "indexed.yaml", sample_dir,
                           f", balance: {{cost: tokens, index: {index}}}")
    for step in range(STEPS):
        for rank in range(WORLD):
            got = which(headrace_bin, indexed, "--step", step, "--rank", rank)
            assert got["deal"] == "dealt"
            assert got == which(headrace_bin, configs["dealt"], "--step", step, "--rank", rank)
    # ... read, not ignored: one cut short is refused.
    index.write_bytes(index.read_bytes()[:-5])
    proc = run_headrace(headrace_bin, "which", indexed, "--step", 0, "--rank", 0, check=False)
    assert proc.returncode == 2 and "batch.balance.index" in proc.stderr, proc.stderr


@pytest.mark.parametrize("args, message", [
    (["--step", 6, "--rank", 0, "--world-size", 2],
     "--step 6: epoch 0 has 6 steps at world size 2 (allowed: 0..5)"),
    (["--step", 0, "--rank", 2, "--world-size", 2], "--rank 2: allowed: 0 to 1 (--world-size 2)"),
    (["--step", 0, "--rank", 1], "--rank 1: allowed: 0 to 0 (--world-size 1)"),
    (["--sample", "nope"], "--sample nope: no sample has that id in epoch 0 (48 records"),
    (["--step", 0], "--step needs --rank R (allowed: 0 to world size - 1)"),
    (["--rank", 0], "--rank needs --step N (allowed: 0 to steps - 1)"),
    ([], "give --step N with --rank R, or --sample ID"),
    (["--sample", "000001", "--step", 0, "--rank", 0],
     "give --step N with --rank R, or --sample ID"),
    (["--step", "x", "--rank", 0], "--step x: allowed: an integer >= 0"),
    (["--sample", "000001", "--world-size", 0], "--world-size 0: allowed: an integer >= 1"),
    (["--sample", "000001", "--epoch", 2],
     "--epoch 2: allowed: 0 to 1 (the config's epochs: 2; --set epochs=N for more)"),
    (["--step", 0, "--rank", 0, "--world-size", 13], "fewer than world_size 13"),
    (["--step", 0, "--rank", 0, "--bogus"], "unknown argument '--bogus'"),
])
def test_bad_input_is_refused_naming_the_flag_and_what_is_allowed(headrace_bin, configs, args,
                                                                  message):
    proc = run_headrace(headrace_bin, "which", configs["ordered"], *args, check=False)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert proc.stdout == ""
