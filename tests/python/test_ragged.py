"""Ragged batch fields through the Python package (issue 27).

A field whose first dimension varies per sample (`[?, D]`) is its samples' rows
concatenated, with `<field>_lengths` (int32, one entry per sample, or per item of a
list); a media list is its items concatenated with `<list>_count`, unless the source
field asks for `pad_items`. Each check compares with the padded form of the same
pipeline, which the engine has always produced: the ragged one must hold exactly the
real part of every padded row, in the same order, and nothing else.
"""
import json
from pathlib import Path

import numpy as np
import pytest

import headrace

ops = headrace.ops


def tokens_pipeline(dataset: Path, pad: bool, **kw):
    return headrace.Pipeline(
        source=dataset / "manifest.jsonl",
        ops=[ops.tokenize(dataset / "tokenizer.model", max_length=48, pad=pad)],
        batch_size=8, seed=4, cpu_threads=2, memory_budget="64MiB", **kw)


def split(values: np.ndarray, lengths: np.ndarray) -> list:
    return np.split(values, np.cumsum(lengths)[:-1]) if len(lengths) else []


def test_unpadded_tokens_are_the_real_part_of_each_padded_row(py_sample):
    import torch
    padded = list(headrace.Loader(tokens_pipeline(py_sample, pad=True)))
    ragged = list(headrace.Loader(tokens_pipeline(py_sample, pad=False)))
    assert len(padded) == len(ragged) == 6
    for p, r in zip(padded, ragged):
        assert set(r) == {"input_ids", "input_ids_lengths", "position_ids",
                          "position_ids_lengths", "labels", "labels_lengths", "index", "id"}
        np.testing.assert_array_equal(np.asarray(p["index"]), np.asarray(r["index"]))
        lengths = np.asarray(r["input_ids_lengths"])
        assert lengths.dtype == np.int32 and lengths.shape == (8,)
        mask = np.asarray(p["attention_mask"])
        np.testing.assert_array_equal(lengths, mask.sum(axis=1))
        assert r["input_ids"].shape == (int(lengths.sum()),)
        for name in ("input_ids", "labels"):
            np.testing.assert_array_equal(np.asarray(r[name + "_lengths"]), lengths)
            rows = split(np.asarray(r[name]), lengths)
            for row, n, full in zip(rows, lengths, np.asarray(p[name])):
                np.testing.assert_array_equal(row, full[:n])
        for positions, n in zip(split(np.asarray(r["position_ids"]), lengths), lengths):
            np.testing.assert_array_equal(positions, np.arange(n))
        # Zero copy, as the fixed fields: numpy and torch see the engine's memory.
        for name in ("input_ids", "input_ids_lengths"):
            assert np.asarray(r[name]).ctypes.data == r.data_ptrs[name]
            assert torch.from_dlpack(r[name]).data_ptr() == r.data_ptrs[name]


def test_ragged_batches_resume_exactly_from_a_state_dict(py_sample):
    pipeline = tokens_pipeline(py_sample, pad=False, epochs=2)
    full = [np.asarray(b["input_ids"]).copy() for b in headrace.Loader(pipeline)]
    first = headrace.Loader(pipeline)
    it = iter(first)
    for _ in range(5):
        next(it)
    state = first.state_dict()
    first.close()
    rest = [np.asarray(b["input_ids"]).copy()
            for b in headrace.Loader(tokens_pipeline(py_sample, pad=False, epochs=2),
                                     state_dict=state)]
    assert len(rest) == len(full) - 5
    for a, b in zip(rest, full[5:]):
        np.testing.assert_array_equal(a, b)


@pytest.fixture(scope="module")
def views_dataset(py_sample: Path, tmp_path_factory) -> Path:
    """Each record with 0, 1 or 2 extra views (other records' images)."""
    out = tmp_path_factory.mktemp("views")
    lines = (py_sample / "manifest.jsonl").read_text().splitlines()
    with open(out / "manifest.jsonl", "w") as f:
        for i, line in enumerate(lines):
            r = json.loads(line)
            r["views"] = [str(py_sample / json.loads(lines[(i + k) % len(lines)])["image"])
                          for k in (1, 2)][: i % 3]
            del r["image"]
            f.write(json.dumps(r) + "\n")
    return out


def views_pipeline(dataset: Path, pad_items: bool, **kw):
    fields = [{"name": "views", "kind": "image", "max_items": 2, "pad_items": pad_items}]
    return headrace.Pipeline(
        source={"manifest": dataset / "manifest.jsonl", "fields": fields,
                "allow_absolute_paths": True, "root": "/"},
        ops=[ops.decode(field="views"), ops.resize(width=24, height=24, field="views"),
             ops.normalize(field="views")],
        batch_size=8, seed=2, cpu_threads=2, memory_budget="64MiB", **kw)


def test_a_media_list_is_its_items_concatenated_unless_padded(views_dataset):
    import torch
    from headrace.torch import TorchLoader
    padded = list(headrace.Loader(views_pipeline(views_dataset, pad_items=True)))
    items = list(headrace.Loader(views_pipeline(views_dataset, pad_items=False)))
    assert len(padded) == len(items) == 6
    for p, c in zip(padded, items):
        count = np.asarray(c["views_count"])
        np.testing.assert_array_equal(count, np.asarray(p["views_count"]))
        np.testing.assert_array_equal(count, np.asarray(c["index"]) % 3)
        assert p["views"].shape == (8, 2, 3, 24, 24)
        assert c["views"].shape == (int(count.sum()), 3, 24, 24), "no padding in the batch"
        full = np.asarray(p["views"])
        for s, chunk in enumerate(split(np.asarray(c["views"]), count)):
            np.testing.assert_array_equal(chunk, full[s, : count[s]])
    # The same tensors reach torch; a batch without any view has an empty [0, ...] field.
    with TorchLoader(views_pipeline(views_dataset, pad_items=False, shuffle=False)) as loader:
        batch = next(iter(loader))
    assert isinstance(batch["views"], torch.Tensor)
    assert batch["views"].shape[0] == int(batch["views_count"].sum())


def test_a_closed_loaders_memory_serves_the_next_until_released(views_dataset):
    """Ragged batches' memory outlives its Loader for the next one of the process
    (core/region_allocator.h, OnClose::kKeepForNext): reused, it changes no value."""
    import gc

    def views_of_one_pass():
        # 256 x 256 float views: each batch and each sample's rows are whole regions.
        pipeline = headrace.Pipeline(
            source={"manifest": views_dataset / "manifest.jsonl", "allow_absolute_paths": True,
                    "root": "/", "fields": [{"name": "views", "kind": "image", "max_items": 2}]},
            ops=[ops.decode(field="views"), ops.resize(width=256, height=256, field="views"),
                 ops.normalize(field="views")],
            batch_size=8, seed=2, shuffle=False, cpu_threads=2, memory_budget="64MiB")
        with headrace.Loader(pipeline) as loader:
            views = [np.asarray(b["views"]).copy() for b in loader]
        gc.collect()
        return views

    headrace.release_memory()
    assert headrace.kept_memory() == 0
    first = views_of_one_pass()
    kept = headrace.kept_memory()
    assert kept > 0, "the closed Loader's regions stay mapped"
    second = views_of_one_pass()
    assert len(first) == len(second) == 6
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    assert headrace.kept_memory() > 0
    assert headrace.release_memory() > 0
    assert headrace.kept_memory() == 0
    assert headrace.release_memory() == 0


def test_pad_items_on_a_field_that_is_no_list_names_the_key(views_dataset):
    fields = [{"name": "image", "kind": "image", "pad_items": True}]
    with pytest.raises(headrace.ConfigError, match=r"source.fields\[0\].pad_items"):
        headrace.Pipeline(source={"manifest": views_dataset / "manifest.jsonl",
                                  "fields": fields})
