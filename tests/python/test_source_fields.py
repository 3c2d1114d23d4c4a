"""source.fields: named fields of declared kinds, scalars and strings through to the batch.

A manifest with, per record, an image, a list of extra views, an int label, a float
score, a list of ints, a caption and a list of tags goes through a real pipeline; each
batch row must carry its own record's values (matched by id), and a record lacking a
single scalar is skipped and named, nothing else lost.
"""
import json
from pathlib import Path

import numpy as np
import pytest

import headrace

ops = headrace.ops

FIELDS = [
    {"name": "image", "kind": "image", "required": True},
    {"name": "views", "kind": "image", "key": "more", "max_items": 2},
    {"name": "conversation", "kind": "conversation", "key": "conversations"},
    {"name": "label", "kind": "int"},
    {"name": "score", "kind": "float"},
    {"name": "boxes", "kind": "int", "max_items": 3},
    {"name": "caption", "kind": "text"},
    {"name": "tags", "kind": "string", "max_items": 2},
]


def expected(i: int) -> dict:
    return {"label": i % 10, "score": i / 4, "boxes": list(range(i % 4)),
            "caption": f"caption {i}", "tags": ["t"] * (i % 3)}


@pytest.fixture(scope="module")
def fields_dataset(py_sample: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fields")
    lines = (py_sample / "manifest.jsonl").read_text().splitlines()
    with open(out / "manifest.jsonl", "w") as f:
        for i, line in enumerate(lines):
            r = json.loads(line)
            r["image"] = str(py_sample / r["image"])
            r["more"] = [str(py_sample / json.loads(lines[(i + k) % len(lines)])["image"])
                         for k in (1, 2)][: i % 3]
            r.update({k: v for k, v in expected(i).items() if k != "caption" or i % 5})
            if i == 7:
                del r["label"]  # a single scalar the batch cannot leave empty
            f.write(json.dumps(r) + "\n")
    return out


def pipeline(dataset: Path, py_sample: Path, **kw):
    return headrace.Pipeline(
        source={"manifest": dataset / "manifest.jsonl", "fields": FIELDS,
                "allow_absolute_paths": True, "root": "/"},
        ops=[ops.decode(), ops.resize(width=32, height=32), ops.normalize(),
             ops.tokenize(py_sample / "tokenizer.model", max_length=32)],
        batch_size=8, seed=3, cpu_threads=2, memory_budget="64MiB",
        overrides={"errors.max_error_rate": 0.5}, **kw)


def test_scalars_and_strings_reach_each_row(fields_dataset, py_sample):
    seen = {}
    errors = []
    with headrace.Loader(pipeline(fields_dataset, py_sample)) as loader:
        for batch in loader:
            errors += batch.errors
            n = len(batch["index"])
            assert batch["label"].shape == (n,) and batch["label"].dtype == "int64"
            assert batch["score"].shape == (n,) and batch["score"].dtype == "float32"
            assert batch["boxes"].shape == (n, 3) and batch["boxes_count"].shape == (n,)
            assert len(batch["id"]) == len(batch["caption"]) == len(batch["tags"]) == n
            label = np.asarray(batch["label"])
            score = np.asarray(batch["score"])
            boxes = np.asarray(batch["boxes"])
            count = np.asarray(batch["boxes_count"])
            for row, index in enumerate(np.asarray(batch["index"])):
                i = int(index)
                want = expected(i)
                assert batch["id"][row] == f"{i:06d}"
                assert label[row] == want["label"]
                assert score[row] == pytest.approx(want["score"])
                assert count[row] == len(want["boxes"])
                assert list(boxes[row][: count[row]]) == want["boxes"]
                assert not boxes[row][count[row]:].any()  # zero-padded
                assert batch["caption"][row] == (want["caption"] if i % 5 else None)
                assert batch["tags"][row] == want["tags"]
                seen[i] = True
    assert sorted(seen) == [i for i in range(48) if i != 7]
    assert len(errors) == 1
    assert "index 7" in errors[0] and "missing_field" in errors[0] and "'label'" in errors[0]


def test_torch_loader_passes_strings_through(fields_dataset, py_sample):
    import torch
    from headrace.torch import TorchLoader
    with TorchLoader(pipeline(fields_dataset, py_sample, shuffle=False)) as loader:
        batch = next(iter(loader))
    assert isinstance(batch["label"], torch.Tensor)
    assert batch["id"][:3] == ["000000", "000001", "000002"]
    assert batch["caption"][1] == "caption 1"


def test_field_errors_name_the_key(fields_dataset, py_sample):
    bad = [dict(f) for f in FIELDS] + [{"name": "label", "kind": "text"}]
    with pytest.raises(headrace.ConfigError, match=r"source.fields\[8\].name: 'label' is also"):
        headrace.Pipeline(source={"manifest": fields_dataset / "manifest.jsonl", "fields": bad})
    # A scalar named like a batch field an op writes: two fields of one name.
    clash = FIELDS + [{"name": "input_ids", "kind": "int"}]
    with pytest.raises(headrace.Error, match="input_ids"):
        p = headrace.Pipeline(
            source={"manifest": fields_dataset / "manifest.jsonl", "fields": clash,
                    "allow_absolute_paths": True, "root": "/"},
            ops=[ops.tokenize(py_sample / "tokenizer.model", max_length=16)])
        with headrace.Loader(p) as loader:
            next(iter(loader))


def test_two_image_fields_run_two_chains(py_sample, tmp_path):
    """Ops name the field they read: a second image field gets its own chain and batch
    field. Here 'depth' is the record's own image, flipped after the resize, so its rows
    are the image rows mirrored, exactly."""
    lines = (py_sample / "manifest.jsonl").read_text().splitlines()
    with open(tmp_path / "manifest.jsonl", "w") as f:
        for line in lines:
            r = json.loads(line)
            r["image"] = r["depth"] = str(py_sample / r["image"])
            f.write(json.dumps(r) + "\n")
    fields = [{"name": "image", "kind": "image"}, {"name": "depth", "kind": "image"},
              {"name": "conversation", "kind": "conversation", "key": "conversations"}]
    p = headrace.Pipeline(
        source={"manifest": tmp_path / "manifest.jsonl", "fields": fields,
                "allow_absolute_paths": True, "root": "/"},
        ops=[ops.decode(), ops.decode(field="depth"),
             ops.resize(width=32, height=32), ops.resize(width=32, height=32, field="depth"),
             ops.flip(p=1.0, field="depth"),
             ops.normalize(), ops.normalize(field="depth")],
        batch_size=8, seed=3, cpu_threads=2, memory_budget="64MiB", shuffle=False)
    with headrace.Loader(p) as loader:
        batch = next(iter(loader))
    image, depth = np.asarray(batch["image"]), np.asarray(batch["depth"])
    assert image.shape == depth.shape == (8, 3, 32, 32)
    assert np.array_equal(depth, image[:, :, :, ::-1])
    assert not np.array_equal(depth, image)


def test_a_list_of_images_goes_through_the_chain_item_by_item(fields_dataset, py_sample):
    """The 'views' list (up to 2 images per record, 0-2 here) through decode, resize and
    normalize: [items, 3, 32, 32] plus views_count. Each item must equal, bit for bit, what
    the single-image chain makes of the same file; the batch holds only real items."""
    def build(extra_ops):
        return headrace.Pipeline(
            source={"manifest": fields_dataset / "manifest.jsonl", "fields": FIELDS,
                    "allow_absolute_paths": True, "root": "/"},
            ops=[ops.decode(), ops.resize(width=32, height=32), ops.normalize()] + extra_ops,
            batch_size=8, seed=3, cpu_threads=2, memory_budget="64MiB", shuffle=False,
            overrides={"errors.max_error_rate": 0.5})

    singles = {}
    with headrace.Loader(build([])) as loader:
        for batch in loader:
            for row, index in enumerate(np.asarray(batch["index"])):
                singles[int(index)] = np.asarray(batch["image"])[row].copy()
    n = len(singles) + 1  # record 7 is skipped (no label)

    list_ops = [ops.decode(field="views"), ops.resize(width=32, height=32, field="views"),
                ops.normalize(field="views")]
    checked = 0
    with headrace.Loader(build(list_ops)) as loader:
        for batch in loader:
            views = np.asarray(batch["views"])
            count = np.asarray(batch["views_count"])
            # The batch's items concatenated: each sample's follow the one before.
            assert views.shape == (count.sum(), 3, 32, 32) and count.dtype == np.int64
            first = np.concatenate([[0], np.cumsum(count)])
            for row, index in enumerate(np.asarray(batch["index"])):
                i = int(index)
                assert count[row] == i % 3
                for k in range(count[row]):
                    source = (i + k + 1) % n
                    if source in singles:
                        assert np.array_equal(views[first[row] + k], singles[source]), (i, k)
                        checked += 1
    assert checked > 30


def test_a_corrupt_item_of_a_list_names_the_item(fields_dataset, py_sample, tmp_path):
    """A record whose second view does not decode is skipped and named by the item's
    place in the list and its URI; every other record comes through."""
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    lines = (fields_dataset / "manifest.jsonl").read_text().splitlines()
    r = json.loads(lines[5])
    assert len(r["more"]) == 2
    r["more"][1] = str(bad)
    lines[5] = json.dumps(r)
    (tmp_path / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    p = headrace.Pipeline(
        source={"manifest": tmp_path / "manifest.jsonl", "fields": FIELDS,
                "allow_absolute_paths": True, "root": "/"},
        ops=[ops.decode(field="views"), ops.resize(width=16, height=16, field="views"),
             ops.normalize(field="views")],
        batch_size=8, seed=3, cpu_threads=2, memory_budget="64MiB",
        overrides={"errors.max_error_rate": 0.5})
    errors, rows = [], 0
    with headrace.Loader(p) as loader:
        for batch in loader:
            errors += batch.errors
            rows += len(batch["index"])
    assert rows == len(lines) - 2  # record 7 lacks its label, record 5 its second view
    named = [e for e in errors if "index 5" in e]
    assert len(named) == 1 and f"views[1] {bad}" in named[0] and "corrupt" in named[0], errors
