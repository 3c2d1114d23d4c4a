"""A state dict claims a position; what it claims is checked against what it can be before
a run starts from it (issue 50: "Lying state dicts are accepted", "Unclear errors"). Each
lie is a headrace.ConfigError naming the state's key and what is allowed, in
load_state_dict and in merge_state_dicts; the rules are pipeline/run_position.h's."""
import copy

import numpy as np
import pytest

import headrace

ops = headrace.ops


def packed(dataset, **kw):
    return headrace.Pipeline(
        dataset / "manifest.jsonl",
        ops=[ops.decode(), ops.resize(shorter_side=32), ops.center_crop(24), ops.normalize(),
             ops.tokenize(dataset / "tokenizer.model", max_length=24, pad=False)],
        batch_size=4, epochs=2, cpu_threads=1, seed=7, memory_budget="64MiB",
        pack={"seq_len": 64, "window": 3}, **kw)


def state_after(pipeline, batches, rank=0, world_size=1):
    loader = headrace.Loader(pipeline, rank=rank, world_size=world_size)
    it = iter(loader)
    for _ in range(batches):
        next(it)
    state = loader.state_dict()
    loader.close()
    return state


@pytest.fixture(scope="module")
def plain_state(py_sample):
    from conftest import small_pipeline
    return state_after(small_pipeline(py_sample, cpu_threads=1), 2)  # 6 batches an epoch


def edited(state, **changes):
    out = copy.deepcopy(state)
    out.update(changes)
    return out


def load(make_pipeline, state):
    loader = headrace.Loader(make_pipeline(cpu_threads=1), state_dict=state)
    try:
        return [b.index for b in loader]
    finally:
        loader.close()


# Before: world_size 0 and batch_size 0 replayed the epoch from its start (6 batches).
@pytest.mark.parametrize("key", ["world_size", "batch_size"])
def test_sizes_below_one_are_refused(make_pipeline, plain_state, key):
    with pytest.raises(headrace.ConfigError, match=rf"state dict: {key}: 0 \(allowed: >= 1\)"):
        load(make_pipeline, edited(plain_state, **{key: 0}))


# Before: batches_per_epoch == batch_in_epoch ended the epoch at once (0 batches): the
# rest of the epoch was skipped.
def test_a_batches_per_epoch_that_is_not_the_pipelines_is_refused(make_pipeline, plain_state):
    with pytest.raises(headrace.ConfigError,
                       match=r"batches_per_epoch: saved 2, this loader 6"):
        load(make_pipeline, edited(plain_state, batches_per_epoch=2))
    with pytest.raises(headrace.ConfigError,
                       match=r"batch_in_epoch: 7 is outside the epoch \(allowed: \[0, "
                             r"batches_per_epoch 6\]\)"):
        load(make_pipeline, edited(plain_state, batch_in_epoch=7))
    # After the epoch's last batch (its `for` not ended yet) is a real position.
    assert load(make_pipeline, edited(plain_state, batch_in_epoch=6)) == []


# Before: headrace.CancelledError: the loader is closed (the engine was closed before its
# batch count was read for the message).
def test_a_dataset_that_changed_under_a_state_is_a_config_error(tmp_path):
    headrace.make_sample(str(tmp_path), samples=48, seed=5, threads=2)
    from conftest import small_pipeline
    state = state_after(small_pipeline(tmp_path, cpu_threads=1), 2)
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text("".join(manifest.read_text().splitlines(keepends=True)[:40]))
    with pytest.raises(headrace.ConfigError,
                       match=r"batches_per_epoch: saved 6, this loader 5 \(the dataset changed"):
        loader = headrace.Loader(small_pipeline(tmp_path, cpu_threads=1), state_dict=state)
        next(iter(loader))


def global_state(state, **remainder):
    return edited(state, kind="global", rank=None, world_size=None, saved_world_size=1,
                  batch_in_epoch=None, remainder={"epoch": 0, **remainder})


# Before: pending [0]*5 was accepted (sample 0 delivered 5 times more); a pending sample
# the rest of the epoch delivers anyway was delivered twice.
def test_pending_samples_must_be_unique_and_taken_from_the_consumed_positions(
        make_pipeline, plain_state):
    with pytest.raises(headrace.ConfigError,
                       match=r"remainder.pending: index 0 appears more than once"):
        load(make_pipeline, global_state(plain_state, consumed=8, pending=[0] * 5))
    full = [i for b in headrace.Loader(make_pipeline(cpu_threads=1, epochs=1))
            for i in np.asarray(b["index"]).tolist()]
    with pytest.raises(headrace.ConfigError,
                       match=rf"remainder.pending: sample {full[20]} is not among the epoch's "
                             r"first 8 positions"):
        load(make_pipeline, global_state(plain_state, consumed=8, pending=[full[20]]))
    with pytest.raises(headrace.ConfigError, match=r"remainder.pending: 9 samples, more than"):
        load(make_pipeline, global_state(plain_state, consumed=8, pending=full[:9]))
    # The honest one: two samples of the first 8 held back, delivered first.
    rest = load(make_pipeline, global_state(plain_state, consumed=8, pending=full[2:4]))
    assert len(rest) == -(-(48 - 8 + 2) // 8)  # 42 samples, the last batch partial


# Before: std::bad_cast, TypeError, nanobind's "incompatible function arguments".
@pytest.mark.parametrize("changes,message", [
    ({"batch_in_epoch": "2"}, r"state dict: batch_in_epoch: expected an int, got '2'"),
    ({"batch_in_epoch": True}, r"state dict: batch_in_epoch: expected an int, got True"),
    ({"epoch": 0.0}, r"state dict: epoch: expected an int, got 0.0"),
    ({"pack": [1]}, r"state dict: pack: expected \{epoch"),
])
def test_values_of_the_wrong_type_name_the_key(make_pipeline, plain_state, changes, message):
    with pytest.raises(headrace.ConfigError, match=message):
        load(make_pipeline, edited(plain_state, **changes))


def test_values_of_the_wrong_type_in_a_global_state_name_the_key(make_pipeline, plain_state):
    with pytest.raises(headrace.ConfigError, match=r"state dict: blend_start\[0\]: expected an "
                                                   r"int, got 'x'"):
        load(make_pipeline, edited(global_state(plain_state, consumed=8, pending=[]),
                                   blend_start=["x"]))
    with pytest.raises(headrace.ConfigError, match=r"state dict: epoch: expected an int, "
                                                   r"got 0.5"):
        load(make_pipeline, edited(global_state(plain_state, consumed=8, pending=[]), epoch=0.5))
    with pytest.raises(headrace.ConfigError,
                       match=r"state dict: remainder.consumed: expected an int, got '8'"):
        load(make_pipeline, global_state(plain_state, consumed="8", pending=[]))


def ranks(state, world, **changes):
    return [edited(state, rank=r, world_size=world, **changes) for r in range(world)]


# Before: 2^62 was taken (a remainder consuming 7.4e19 positions); a string batch was a
# TypeError from a comparison; world_size 0 an unreadable "ranks [0, 1] of world_size 0".
def test_a_merge_refuses_positions_outside_the_epoch_and_wrong_types(plain_state):
    with pytest.raises(headrace.ConfigError,
                       match=r"merge_state_dicts: states\[0\]: state dict: batch_in_epoch: "
                             r"4611686018427387904 is outside the epoch"):
        headrace.merge_state_dicts(ranks(plain_state, 2, batch_in_epoch=2 ** 62,
                                         batches_per_epoch=None))
    with pytest.raises(headrace.ConfigError,
                       match=r"merge_state_dicts: states\[0\]: state dict: batch_in_epoch: "
                             r"expected an int, got '1'"):
        headrace.merge_state_dicts(ranks(plain_state, 2, batch_in_epoch="1"))
    with pytest.raises(headrace.ConfigError, match=r"states\[0\]: state dict: world_size: 0"):
        headrace.merge_state_dicts([edited(plain_state, world_size=0)])
    with pytest.raises(headrace.ConfigError, match=r"batches_per_epoch: rank 1 has 5, rank 0 6"):
        states = ranks(plain_state, 2)
        states[1]["batches_per_epoch"] = 5
        headrace.merge_state_dicts(states)


# Before: waiting [0]*500 was merged into a rest that delivered sample 0 500 times;
# pack.delivered 2^40 was taken.
def test_pack_windows_are_checked(py_sample):
    states = [state_after(packed(py_sample), 2, rank=r, world_size=2) for r in range(2)]
    assert all(s["pack"] is not None for s in states)
    lying = copy.deepcopy(states)
    lying[0]["pack"]["waiting"] = [0] * 500
    with pytest.raises(headrace.ConfigError,
                       match=r"states\[0\]: state dict: pack.waiting: index 0 appears more "
                             r"than once"):
        headrace.merge_state_dicts(lying)
    twice = copy.deepcopy(states)
    twice[0]["pack"]["waiting"] = [7]
    twice[1]["pack"]["waiting"] = [7]
    with pytest.raises(headrace.ConfigError, match=r"sample 7 waits in another rank's window"):
        headrace.merge_state_dicts(twice)
    merged = headrace.merge_state_dicts(states)  # the honest ones
    assert merged["remainder"]["consumed"] == 2 * 2 * 4
    state = state_after(packed(py_sample), 2)
    state["pack"]["delivered"] = 2 ** 40
    with pytest.raises(headrace.ConfigError,
                       match=r"state dict: pack.delivered: 1099511627776 \(allowed: \[0, "
                             r"batch_size 4\]"):
        headrace.Loader(packed(py_sample), state_dict=state)
