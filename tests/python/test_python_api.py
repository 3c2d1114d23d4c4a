"""The Python API: building pipelines, zero-copy batches, ranks, resume, bad input."""
import gc
import hashlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import headrace

ops = headrace.ops


def digest(batch) -> str:
    h = hashlib.sha256()
    for name in sorted(batch):
        h.update(name.encode())
        h.update(np.asarray(batch[name]).tobytes())
    return h.hexdigest()


def run_digests(loader):
    return [(b.epoch, b.index, digest(b)) for b in loader]


def test_builder_and_yaml_give_the_same_spec(py_sample, make_pipeline, tmp_path):
    built = make_pipeline()
    config = tmp_path / "p.yaml"
    config.write_text(built.to_yaml())
    loaded = headrace.Pipeline.from_yaml(config)
    assert loaded.to_yaml() == built.to_yaml()
    assert loaded.fingerprint() == built.fingerprint()
    # Threads and budgets do not change batch content, so not the fingerprint either.
    assert make_pipeline(cpu_threads=1).fingerprint() == built.fingerprint()
    assert make_pipeline(seed=2).fingerprint() != built.fingerprint()
    over = headrace.Pipeline.from_yaml(config, overrides={"batch.size": 4})
    assert over.spec().batch_size == 4


def test_batch_tensors_share_the_engine_memory(make_pipeline):
    import torch
    with headrace.Loader(make_pipeline()) as loader:
        batch = next(iter(loader))
    assert set(batch) == {"image", "input_ids", "attention_mask", "labels", "index", "id"}
    # The ids are strings, one per sample in row order: the records' own ids.
    assert len(batch["id"]) == len(batch["index"])
    assert all(isinstance(i, str) for i in batch["id"])
    for name, tensor in batch.items():
        if name == "id":
            continue
        assert hasattr(tensor, "__dlpack__") and tensor.__dlpack_device__() == (1, 0)
        as_numpy = np.asarray(tensor)
        as_torch = torch.from_dlpack(tensor)
        engine_ptr = batch.data_ptrs[name]
        assert as_numpy.ctypes.data == engine_ptr, name
        assert as_torch.data_ptr() == engine_ptr, name
        assert memoryview(tensor).obj is not None
    image = np.asarray(batch["image"])
    assert image.shape == (8, 3, 56, 56) and image.dtype == np.float32
    assert np.asarray(batch["input_ids"]).dtype == np.int64


def test_memory_lives_as_long_as_a_view(make_pipeline):
    import torch
    loader = headrace.Loader(make_pipeline())
    batch = next(iter(loader))
    image = torch.from_dlpack(batch["image"])
    ids = np.asarray(batch["input_ids"])
    expected_image, expected_ids = image.clone(), ids.copy()
    loader.close()
    del batch, loader
    gc.collect()
    # The engine is gone; its buffers are kept by the views, with the same content.
    churn = [np.random.default_rng(i).random(1 << 16) for i in range(64)]
    assert torch.equal(image, expected_image)
    assert np.array_equal(ids, expected_ids)
    del churn
    view, address = headrace._headrace._test_tensor(1000)
    arr = np.asarray(view)
    del view
    gc.collect()
    assert arr.ctypes.data == address and list(arr[:5]) == [0, 1, 2, 3, 4]


def test_ranks_get_disjoint_equal_shares_independent_of_threads(make_pipeline):
    world = 3
    shares = []
    for rank in range(world):
        indices = [tuple(np.asarray(b["index"]).tolist())
                   for b in headrace.Loader(make_pipeline(cpu_threads=2), rank=rank,
                                            world_size=world)]
        one_thread = [tuple(np.asarray(b["index"]).tolist())
                      for b in headrace.Loader(make_pipeline(cpu_threads=1), rank=rank,
                                               world_size=world)]
        assert indices == one_thread
        shares.append(indices)
    assert len({len(s) for s in shares}) == 1 and len(shares[0]) == 2  # 6 batches / 3
    flat = [i for share in shares for batch in share for i in batch]
    assert len(flat) == len(set(flat)) == 48


@pytest.mark.parametrize("k", [1, 5, 6, 7, 11])
def test_resume_yields_exactly_the_rest_of_the_run(make_pipeline, k):
    # 48 samples, batch 8: 6 batches per epoch, 2 epochs; prefetch 4 keeps batches in
    # flight that the consumer never took.
    pipeline = make_pipeline(epochs=2, prefetch=4)
    full = run_digests(headrace.Loader(pipeline).run())
    assert len(full) == 12 and full[5][0] == 0 and full[6][0] == 1
    first = headrace.Loader(pipeline)
    it = first.run()
    seen = [next(it) for _ in range(k)]
    assert [(b.epoch, b.index, digest(b)) for b in seen] == full[:k]
    state = first.state_dict()
    # After the last batch of an epoch the position is (epoch, 6): that epoch's `for`
    # has not ended yet.
    assert state["epoch"] * 6 + state["batch_in_epoch"] == k
    assert state["batch_in_epoch"] == (6 if k == 6 else k % 6)
    first.close()
    resumed = headrace.Loader(make_pipeline(epochs=2, prefetch=2, cpu_threads=1),
                              state_dict=state)
    assert run_digests(resumed.run()) == full[k:]


def test_state_dict_from_another_pipeline_is_refused(make_pipeline):
    loader = headrace.Loader(make_pipeline(seed=1))
    next(iter(loader))
    state = loader.state_dict()
    with pytest.raises(headrace.ConfigError, match=r"seed: saved 1, this loader 2"):
        headrace.Loader(make_pipeline(seed=2)).load_state_dict(state)
    # Another batch size is an elastic resume (test_elastic.py): the rest of the epoch,
    # 40 samples, in batches of 4.
    assert len(headrace.Loader(make_pipeline(batch_size=4), state_dict=state)) == 10
    other_crop = make_pipeline(extra_ops=[ops.flip(p=0.5)])
    with pytest.raises(headrace.ConfigError, match=r"ops: saved"):
        headrace.Loader(other_crop, state_dict=state)
    two = headrace.Loader(make_pipeline(seed=1), rank=0, world_size=2)
    next(iter(two))
    with pytest.raises(headrace.ConfigError, match=r"rank: saved 0, this loader 1"):
        headrace.Loader(make_pipeline(seed=1), rank=1, world_size=2, state_dict=two.state_dict())
    two.close()
    bad_params = make_pipeline(seed=1, overrides={"ops.1.image.resize.shorter_side": 60})
    with pytest.raises(headrace.ConfigError, match=r"fingerprint"):
        headrace.Loader(bad_params, state_dict=state)


def test_wrong_field_name_names_the_key(py_sample, make_pipeline):
    with pytest.raises(headrace.ConfigError, match=r"source.image_feild.*allowed") as e:
        headrace.Pipeline(source={"manifest": py_sample / "manifest.jsonl",
                                  "image_feild": "image"},
                          ops=[ops.tokenize(py_sample / "tokenizer.model")])
    assert e.value.code == "invalid_argument"
    assert isinstance(e.value, ValueError)
    with pytest.raises(headrace.ConfigError, match=r"batch.sise"):
        make_pipeline(overrides={"batch.sise": 3})
    with pytest.raises(headrace.ConfigError, match=r"resize.*shorter_sid"):
        headrace.Pipeline(source=py_sample / "manifest.jsonl",
                          ops=[ops.decode(), ops.BuiltinOp("image.resize", {"shorter_sid": 3})])


def test_batch_over_the_memory_budget_is_refused(make_pipeline):
    pipeline = make_pipeline(batch_size=64, memory_budget="1MiB")
    with pytest.raises(headrace.ConfigError,
                       match=r"center_crop.size 56: a batch of 64 samples would take \d+ bytes"
                             r".*memory.budget_bytes"):
        next(iter(headrace.Loader(pipeline)))


def image_mean(sample):
    return {"mean": np.asarray(sample["image"], dtype=np.float32).mean(axis=(0, 1)),
            "idx2": np.int64(sample["index"] * 2)}


MEAN_OUTPUTS = {"mean": ("f32", [3]), "idx2": ("i64", [])}


def test_map_op_writes_fields_on_engine_threads(make_pipeline):
    import threading
    threads = set()

    def fn(sample):
        threads.add(threading.get_ident())
        return image_mean(sample)

    pipeline = make_pipeline(extra_ops=[ops.map(fn, MEAN_OUTPUTS)])
    batches = list(headrace.Loader(pipeline))
    assert threading.get_ident() not in threads
    for b in batches:
        index = np.asarray(b["index"])
        assert np.array_equal(np.asarray(b["idx2"]), index * 2)
        mean = np.asarray(b["mean"])
        assert mean.shape == (len(index), 3) and (mean > 0).all() and (mean < 255).all()


def test_map_op_in_processes_matches_threads(make_pipeline):
    threaded = list(headrace.Loader(make_pipeline(extra_ops=[ops.map(image_mean, MEAN_OUTPUTS)])))
    in_procs = list(headrace.Loader(make_pipeline(
        extra_ops=[ops.map(image_mean, MEAN_OUTPUTS, processes=2)])))
    assert [digest(b) for b in threaded] == [digest(b) for b in in_procs]


def fails_on_7(sample):
    if sample["index"] == 7:
        raise ValueError("bad sample seven")
    return {"one": np.int64(1)}


@pytest.mark.parametrize("processes", [0, 1])
def test_user_function_that_raises_names_the_sample(make_pipeline, processes):
    pipeline = make_pipeline(extra_ops=[ops.map(fails_on_7, {"one": ("i64", [])},
                                                processes=processes)],
                             overrides={"errors.max_error_rate": 0.5})
    errors = [e for b in headrace.Loader(pipeline) for e in b.errors]
    assert len(errors) == 1
    assert "index 7," in errors[0] and "fails_on_7" in errors[0]
    assert ": user_function_error: " in errors[0] and ".jpg" in errors[0]
    assert "Traceback" in errors[0] and "ValueError: bad sample seven" in errors[0]


def test_user_function_failing_every_sample_fails_the_run(make_pipeline):
    def always(sample):
        raise KeyError("nope")

    pipeline = make_pipeline(extra_ops=[ops.map(always, {"x": ("i64", [])})],
                             overrides={"errors.min_samples": 8})
    with pytest.raises(headrace.Error, match=r"too many bad samples"):
        list(headrace.Loader(pipeline))


def test_map_batch_runs_on_engine_threads_in_place(make_pipeline):
    import threading
    import time
    calls = []  # (thread, epoch, index, seed, seconds)

    def halve(batch):
        start = time.perf_counter()
        image = batch["image"]
        assert isinstance(image, np.ndarray) and image.flags.writeable
        assert image.shape[0] == len(batch["index"])
        image *= 0.5
        while time.perf_counter() - start < 0.004:  # burn a few ms, holding the GIL
            pass
        calls.append((threading.get_ident(), batch.epoch, batch.index, batch.seed,
                      time.perf_counter() - start))

    plain = list(headrace.Loader(make_pipeline()))
    # One epoch: with no limit the engine would run on into epoch 1 while this loop waits.
    loader = headrace.Loader(make_pipeline(epochs=1).map_batch(halve))
    it = iter(loader)
    halved = [next(it) for _ in range(len(loader))]  # the engine stays up for report()
    report = loader.report()
    stats = loader.stats()
    loader.close()

    assert len(calls) == len(halved) == 6
    assert threading.get_ident() not in {c[0] for c in calls}
    assert sorted(c[1:3] for c in calls) == [(0, i) for i in range(6)]
    assert len({c[3] for c in calls}) == 6 and all(isinstance(c[3], int) for c in calls)
    for p, h in zip(plain, halved):
        assert np.array_equal(np.asarray(h["image"]), np.asarray(p["image"]) * 0.5)
        assert np.array_equal(np.asarray(h["input_ids"]), np.asarray(p["input_ids"]))
    # The function's time is the engine's: measured in C++ around each call and listed
    # among the ops, while the consumer's wait is accounted apart.
    op = [o for o in report["ops"] if o["name"].startswith("python.map_batch(")]
    assert len(op) == 1 and "halve" in op[0]["name"]
    assert op[0]["busy_s"] >= sum(c[4] for c in calls)
    assert 0.0 <= stats["wait_time_ratio"] <= 1.0


def test_map_batch_returned_fields_are_copied_in(make_pipeline):
    plain = list(headrace.Loader(make_pipeline()))

    def shift(batch):
        return {"input_ids": batch["input_ids"] + 1, "image": batch["image"]}

    def same(batch):
        batch["labels"][:] = -7
        return batch  # the views themselves: nothing to copy

    out = list(headrace.Loader(make_pipeline().map_batch(shift).map_batch(same)))
    for p, o in zip(plain, out):
        assert np.array_equal(np.asarray(o["input_ids"]), np.asarray(p["input_ids"]) + 1)
        assert np.array_equal(np.asarray(o["image"]), np.asarray(p["image"]))
        assert (np.asarray(o["labels"]) == -7).all()

    strict = {"errors.max_error_rate": 1.0}
    for fn, message in [
            (lambda b: {"flag": np.ones(len(b["index"]))}, r"'flag', which is not a field"),
            (lambda b: {"input_ids": b["input_ids"].astype(np.int32)},
             r"'input_ids' as int32 of shape \(8, 48\); the field is int64"),
            (lambda b: [1, 2], r"returned list")]:
        loader = headrace.Loader(make_pipeline(overrides=strict).map_batch(fn))
        assert list(loader) == []  # every batch dropped
        with pytest.raises(headrace.Error, match=message):
            list(headrace.Loader(make_pipeline().map_batch(fn)))


def fails_on_batch_1(batch):
    if batch.index == 1:
        raise ValueError("bad batch one")


def test_map_batch_that_raises_drops_the_batch_and_names_its_samples(make_pipeline):
    pipeline = make_pipeline(overrides={"errors.max_error_rate": 0.5}).map_batch(
        fails_on_batch_1)
    loader = headrace.Loader(pipeline)
    it = iter(loader)
    batches = [next(it) for _ in range(5)]
    report = loader.report()
    with pytest.raises(StopIteration):
        next(it)
    assert [b.index for b in batches] == [0, 2, 3, 4, 5]
    assert report["errors"]["by_kind"] == {"user_function_error": 8}
    first = report["errors"]["first"]
    assert len(first) == 8 and {e["kind"] for e in first} == {"user_function_error"}
    assert all(e["epoch"] == 0 and e["uri"].endswith(".jpg") for e in first)
    reason = first[0]["reason"]
    assert "fails_on_batch_1" in reason and "on batch 1 of epoch 0" in reason
    assert "Traceback" in reason and "ValueError: bad batch one" in reason

    def broken(batch):
        raise RuntimeError("boom")

    with pytest.raises(headrace.Error, match=r"(?s)user_function_error=48.*epoch 0, "
                                             r"index \d+, .*map_batch.*Traceback.*boom") as e:
        list(headrace.Loader(make_pipeline().map_batch(broken)))
    assert e.value.code == "resource_exhausted"


def test_map_op_wrong_output_shape(make_pipeline):
    wrong = make_pipeline(extra_ops=[ops.map(lambda s: {"v": np.zeros(4)}, {"v": ("f32", [3])})],
                          overrides={"errors.min_samples": 8})
    with pytest.raises(headrace.Error,
                       match=r"user_function_error.*'v' of shape \(4\), declared \(3\)"):
        list(headrace.Loader(wrong))


def test_state_dict_names_a_different_python_function(make_pipeline, tmp_path):
    def f(batch):
        pass

    def g(batch):
        pass

    def h(sample):
        return {"x": np.int64(0)}

    def k(sample):
        return {"x": np.int64(1)}

    base = make_pipeline()
    with_f = base.map_batch(f)
    assert "python.map_batch(" in with_f.to_yaml() and "f)" in with_f.to_yaml()
    assert len({base.fingerprint(), with_f.fingerprint(), base.map_batch(g).fingerprint()}) == 3
    loader = headrace.Loader(with_f)
    next(iter(loader))
    state = loader.state_dict()
    loader.close()
    with pytest.raises(headrace.ConfigError, match=r"batch_ops: saved \['python.map_batch\("
                                                   r".*\.f\)'\], this loader \[.*\.g\)'\]"):
        headrace.Loader(base.map_batch(g), state_dict=state)
    with pytest.raises(headrace.ConfigError, match=r"batch_ops: saved \[.*\], this loader \[\]"):
        headrace.Loader(base, state_dict=state)
    resumed = headrace.Loader(base.map_batch(f), state_dict=state)  # same function name
    assert (resumed.state_dict()["epoch"], resumed.state_dict()["batch_in_epoch"]) == (0, 1)
    (tmp_path / "f.yaml").write_text(with_f.to_yaml())
    with pytest.raises(headrace.ConfigError, match=r"batch_ops: batch ops are code"):
        headrace.Pipeline.from_yaml(tmp_path / "f.yaml")

    out = {"x": ("i64", [])}
    mapped = headrace.Loader(make_pipeline(extra_ops=[ops.map(h, out)]))
    next(iter(mapped))
    state = mapped.state_dict()
    mapped.close()
    with pytest.raises(headrace.ConfigError, match=r"ops: saved .*\.h\)'.*this loader.*\.k\)'"):
        headrace.Loader(make_pipeline(extra_ops=[ops.map(k, out)]), state_dict=state)


def test_batch_tensors_have_shape_dtype_len(make_pipeline):
    with headrace.Loader(make_pipeline()) as loader:
        batch = next(iter(loader))
    image = batch["image"]
    assert isinstance(image, headrace.Tensor)
    assert image.shape == (8, 3, 56, 56) and image.dtype == "float32" and image.ndim == 4
    assert len(image) == 8 and batch["input_ids"].dtype == np.dtype(np.int64)
    as_array = np.asarray(image)
    assert as_array.ctypes.data == batch.data_ptrs["image"]  # __array__/buffer: no copy
    copied = np.array(image, copy=True)
    assert copied.ctypes.data != batch.data_ptrs["image"] and np.array_equal(copied, as_array)
    assert np.asarray(image, dtype=np.float64).dtype == np.float64
    assert repr(image) == "headrace.Tensor(shape=(8, 3, 56, 56), dtype=float32)"
    assert "image" in repr(batch) and "(8, 3, 56, 56)" in repr(batch)


def test_gil_is_released_while_waiting_and_working(py_sample, tmp_path):
    # The consumer blocks in next() until a Python op on an engine thread has run: if
    # next() held the GIL this would deadlock, so it runs in a child with a deadline.
    script = tmp_path / "gil.py"
    script.write_text(textwrap.dedent(f"""
        import threading, numpy as np, headrace, sys
        sys.path.insert(0, {str(py_sample.parent)!r})
        ops = headrace.ops
        entered = threading.Event()
        def fn(sample):
            entered.set()
            return {{"x": np.int64(0)}}
        p = headrace.Pipeline(source={str(py_sample / 'manifest.jsonl')!r},
                              ops=[ops.tokenize({str(py_sample / 'tokenizer.model')!r}),
                                   ops.map(fn, {{"x": ("i64", [])}})], batch_size=4,
                              cpu_threads=2)
        batch = next(iter(headrace.Loader(p)))
        assert entered.is_set()
        print("ok", np.asarray(batch["x"]).shape)
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "ok (4,)" in proc.stdout


def test_first_numpy_import_on_engine_threads_does_not_deadlock(py_sample, tmp_path):
    # numpy is first imported by Python ops on two engine threads at once (the script
    # never imports it): the import releases the GIL, which must not deadlock.
    script = tmp_path / "first_import.py"
    script.write_text(textwrap.dedent(f"""
        import sys, headrace
        assert "numpy" not in sys.modules
        ops = headrace.ops
        p = headrace.Pipeline(source={str(py_sample / 'manifest.jsonl')!r},
                              ops=[ops.tokenize({str(py_sample / 'tokenizer.model')!r}),
                                   ops.map(lambda s: {{"x": s["index"]}}, {{"x": ("i64", [])}})],
                              batch_size=4, cpu_threads=2).map_batch(lambda b: {{"x": b["x"]}})
        print("ok", sum(len(b["x"]) for b in headrace.Loader(p)))
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "ok 48" in proc.stdout


def test_torch_adapter_on_cpu(make_pipeline):
    import torch
    import headrace.torch as ht
    loader = ht.TorchLoader(make_pipeline(epochs=1), device="cpu", pin_memory=True)
    assert not loader.moves  # CPU: no transfer step
    assert loader.loader.pinned == headrace._headrace._pinned_available()
    ratios = []
    for batch in loader:
        assert isinstance(batch["image"], torch.Tensor)
        assert batch["image"].shape == (8, 3, 56, 56)
        ratios.append(loader.wait_time_ratio)
    assert len(ratios) == 6 and all(0.0 <= r <= 1.0 for r in ratios)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            ht.TorchLoader(make_pipeline(), device="cuda")


def test_a_python_op_output_named_like_another_field_is_refused(make_pipeline):
    def fn(sample):
        return {"index": np.int64(0)}

    with pytest.raises(headrace.ConfigError, match=r"'index' is the engine's own"):
        next(iter(headrace.Loader(make_pipeline(extra_ops=[ops.map(fn, {"index": ("i64", [])})]))))
    with pytest.raises(headrace.ConfigError,
                       match=r"writes the field 'labels', which ops\[4\].text.tokenize"):
        next(iter(headrace.Loader(make_pipeline().map(fn, {"labels": ("i64", [])}))))


def test_op_builders_come_from_the_cpp_op_list():
    schema = headrace._headrace._op_schema()
    names = [entry["name"] for entry in schema]
    assert names[:2] == ["image.decode", "image.resize"] and "text.tokenize" in names
    # Every op has a builder made from its schema: named by the last part of its name for
    # image and text ops, by its modality too for the others (video_decode).
    for name in names:
        modality, short = name.rsplit(".", 1)
        builder = getattr(ops, short if modality in ("image", "text") else f"{modality}_{short}")
        assert builder().name == name
    assert ops.decode().name == "image.decode" and ops.video_decode().name == "video.decode"
    assert ops.audio_crop().name == "audio.crop" and not hasattr(ops, "crop")
    resize = next(e for e in schema if e["name"] == "image.resize")
    assert [p[0] for p in resize["params"]] == ["shorter_side", "width", "height", "antialias",
                                                "field"]
    normalize = next(e for e in schema if e["name"] == "image.normalize")
    assert ("dtype", "enum", "f32", ["f32", "f16", "bf16"]) in [tuple(p) for p in
                                                                 normalize["params"]]
    assert ("mean", "list[float, 3]", [0.485, 0.456, 0.406], None) in [
        tuple(p) for p in normalize["params"]]
    # Positional parameters follow the op's declaration order; the generic form is the same.
    assert ops.resize(256) == ops.op("image.resize", shorter_side=256)
    assert ops.center_crop(224).config() == {"image.center_crop": {"size": 224}}
    assert ops.tokenize("m.model", 48).config() == {
        "text.tokenize": {"model": "m.model", "max_length": 48}}


def test_an_unknown_op_parameter_fails_as_in_yaml():
    with pytest.raises(headrace.ConfigError,
                       match=r"image.resize.shorter_sid: unknown key \(allowed for image.resize: "
                             r"shorter_side, width, height, antialias, field\)"):
        ops.resize(shorter_sid=3)
    with pytest.raises(headrace.ConfigError, match=r"image.flip.p: expected a finite number"):
        ops.op("image.flip", p="often")
    with pytest.raises(headrace.ConfigError, match=r"unknown op 'image.blur' \(allowed: image."):
        ops.op("image.blur")
    with pytest.raises(TypeError, match="at most"):
        ops.flip(0.5, "image", 3)


def test_ops_name_the_values_they_read_and_write(make_pipeline, py_sample):
    # The defaults spelled out give the same pipeline as the defaults.
    default = make_pipeline(shuffle=False)
    named = headrace.Pipeline(
        source=py_sample / "manifest.jsonl", shuffle=False, batch_size=8, seed=1,
        cpu_threads=2, memory_budget="64MiB",
        ops=[ops.decode(field="image"), ops.resize(shorter_side=64, field="image"),
             ops.center_crop(56, field="image"), ops.normalize(field="image", output="image"),
             ops.tokenize(py_sample / "tokenizer.model", max_length=48, field="conversation")])
    a, b = next(iter(headrace.Loader(default))), next(iter(headrace.Loader(named)))
    assert list(a.keys()) == list(b.keys())
    for key in a.keys():
        if isinstance(a[key], list):  # the ids
            assert a[key] == b[key]
        else:
            assert bytes(memoryview(a[key])) == bytes(memoryview(b[key])), key
    # A normalize of a value nothing decoded is refused, naming the op and what exists.
    with pytest.raises(headrace.ConfigError,
                       match=r"ops\[1\].image.normalize: reads 'image' as an image, but at this "
                             r"point 'image' is encoded bytes .*add image.decode before it"):
        headrace.Pipeline(source=py_sample / "manifest.jsonl",
                          ops=[ops.tokenize(py_sample / "tokenizer.model"), ops.normalize()])
