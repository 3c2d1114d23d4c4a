"""`headrace materialize` and `source.materialized`, end to end: a pipeline's samples
written once read back as the very batches the pipeline makes (same digests, every epoch,
shuffled), with no operator left but the row copy; random augmentation is refused without
--epochs and written per epoch with it; bad destinations and bad materializations fail
before any work, naming what is wrong; and the same through a real S3 (moto)."""
import io
import json
import shutil
import tarfile

import numpy as np
import pytest

from e2e_util import read_report, run_headrace, write_config

FLIP = "  - image.flip: {p: 0.5}\n"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, headrace_bin):
    out = tmp_path_factory.mktemp("mat-sample")
    run_headrace(headrace_bin, "make-sample", "--out", out, "--samples", 40, "--seed", 2)
    return out


def pipeline(path, dataset, flip=False):
    """write_config's pipeline, shuffled over 2 epochs; with an image.flip when `flip`."""
    config = write_config(path, dataset, extra="shuffle: true")
    text = config.read_text().replace("epochs: 1", "epochs: 2")
    if flip:
        text = text.replace("  - image.normalize", FLIP + "  - image.normalize")
    config.write_text(text)
    return config


def reader(path, uri, **keys):
    """A pipeline reading the materialization at `uri`, with the batch and order keys of
    write_config's."""
    seed = keys.get("seed", 1)
    path.write_text(f"""
source: {{materialized: "{uri}"}}
seed: {seed}
epochs: {keys.get('epochs', 2)}
shuffle: true
batch: {{size: 8}}
execution: {{cpu_threads: 2}}
memory: {{budget_bytes: 64MiB}}
trainer: {{step_ms: 0}}
{keys.get('extra', '')}
""")
    return path


def run(binary, config, tmp_path, name, *args, check=True, env=None):
    report = tmp_path / f"{name}.json"
    proc = run_headrace(binary, "run", config, "--report", report, "--digests", "--quiet",
                        *args, check=check, env=env)
    return (read_report(report) if report.exists() else None), proc


def members(shard):
    with tarfile.open(shard) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


def test_materialized_batches_are_the_pipelines(dataset, headrace_bin, tmp_path):
    config = pipeline(tmp_path / "p.yaml", dataset)
    original, _ = run(headrace_bin, config, tmp_path, "original")
    out = tmp_path / "mat"
    proc = run_headrace(headrace_bin, "materialize", config, "--to", out, "--shard-size", "200KB")
    assert "40 samples (0 skipped)" in proc.stdout

    info = json.loads((out / "materialized.json").read_text())
    assert info["format"] == "headrace.materialized" and info["version"] == 1
    assert info["epochs"] == "all" and info["random_ops"] == [] and info["seed"] == 1
    assert info["dataset_samples"] == 40 and info["layout"] == "per_sample"
    assert [(f["name"], f["dtype"], f["shape"]) for f in info["fields"]] == [
        ("image", "f32", [3, 56, 56]), ("input_ids", "i64", [48]),
        ("attention_mask", "i64", [48]), ("labels", "i64", [48])]
    assert "image.center_crop" in (out / "config.yaml").read_text()
    shards = info["sets"][0]["shards"]
    assert len(shards) > 1 and sum(s["samples"] for s in shards) == 40

    # Inspectable: NumPy reads each member; the .json holds the id.
    first = members(out / shards[0]["shard"])
    image = np.load(io.BytesIO(first["000000000.image.npy"]))
    assert image.dtype == np.float32 and image.shape == (3, 56, 56)
    meta = json.loads(first["000000000.json"])
    assert meta["index"] == 0 and meta["id"]
    ids = json.loads((out / (shards[0]["shard"] + ".ids.json")).read_text())
    assert ids[0] == meta["id"]

    back, _ = run(headrace_bin, reader(tmp_path / "r.yaml", out), tmp_path, "back")
    assert back["samples"] == original["samples"] == 80
    assert back["batch_digests"] == original["batch_digests"]
    # No CPU stage left but the copy of the stored rows.
    assert [op["name"] for op in original["ops"]] == [
        "image.decode", "image.resize", "image.center_crop", "image.normalize", "text.tokenize"]
    assert [op["name"] for op in back["ops"]] == ["source.materialized"]
    assert back["source"].startswith(f"materialized {out} (40 samples, epochs all")

    # Another batch size re-batches the same samples; epoch 1 is reshuffled.
    other, _ = run(headrace_bin, reader(tmp_path / "r5.yaml", out), tmp_path, "r5",
                   "--set", "batch.size=5")
    assert other["samples"] == 80


def test_ragged_fields_are_materialized_per_sample_and_read_back_the_same(dataset, headrace_bin,
                                                                          tmp_path):
    """Unpadded tokens (input_ids [?] with input_ids_lengths): each sample's member holds
    its own tokens, and the batches read back equal the pipeline's."""
    config = pipeline(tmp_path / "p.yaml", dataset)
    config.write_text(config.read_text().replace("max_length: 48}", "max_length: 48, pad: false}"))
    original, _ = run(headrace_bin, config, tmp_path, "original")
    out = tmp_path / "mat"
    run_headrace(headrace_bin, "materialize", config, "--to", out)
    info = json.loads((out / "materialized.json").read_text())
    layouts = {f["name"]: (f["shape"], f.get("layout", "fixed")) for f in info["fields"]}
    assert layouts == {"image": ([3, 56, 56], "fixed"), "input_ids": ([], "ragged"),
                       "input_ids_lengths": ([], "lengths"), "position_ids": ([], "ragged"),
                       "position_ids_lengths": ([], "lengths"), "labels": ([], "ragged"),
                       "labels_lengths": ([], "lengths")}
    first = members(out / info["sets"][0]["shards"][0]["shard"])
    ids = np.load(io.BytesIO(first["000000000.input_ids.npy"]))
    lengths = np.load(io.BytesIO(first["000000000.input_ids_lengths.npy"]))
    assert ids.dtype == np.int64 and lengths.dtype == np.int32
    assert lengths.shape == (1,) and ids.shape == (int(lengths[0]),) and 0 < len(ids) <= 48
    positions = np.load(io.BytesIO(first["000000000.position_ids.npy"]))
    np.testing.assert_array_equal(positions, np.arange(len(ids)))

    back, _ = run(headrace_bin, reader(tmp_path / "r.yaml", out), tmp_path, "back")
    assert back["samples"] == original["samples"] == 80
    assert back["batch_digests"] == original["batch_digests"]


def test_a_materialization_packs_as_the_pipeline_does(dataset, headrace_bin, tmp_path):
    """batch.pack over what `materialize` wrote: the token fields are still known as
    token rows (materialized.json's tokens_of) and the tokenizer's pad and ignore ids are
    kept (its sequences), so the packed batches read back equal the pipeline's packed
    ones, and the report says what packing did."""
    config = pipeline(tmp_path / "p.yaml", dataset)
    config.write_text(config.read_text().replace("max_length: 48}", "max_length: 48, pad: false}"))
    pack = ["--set", "batch.pack.seq_len=64", "--set", "batch.pack.window=4"]
    original, _ = run(headrace_bin, config, tmp_path, "original", *pack)
    out = tmp_path / "mat"
    run_headrace(headrace_bin, "materialize", config, "--to", out)
    sequences = json.loads((out / "materialized.json").read_text())["sequences"]
    assert [(s["field"], s["ignore_index"]) for s in sequences] == [("input_ids", -100)]
    # The SentencePiece model of make-sample pads with a non-zero id: a read-back that
    # padded with 0 would give other rows.
    assert sequences[0]["pad_id"] != 0, sequences
    back, _ = run(headrace_bin, reader(tmp_path / "r.yaml", out), tmp_path, "back", *pack)
    assert back["batch_digests"] == original["batch_digests"]
    p = original["pack"]
    assert p["seq_len"] == 64 and p["samples"] == 80 and 0 < p["fill"] <= 1
    assert p["padding_tokens"] == p["rows"] * 64 - p["tokens"] and p["window_samples"] == 0
    assert back["pack"]["rows"] == p["rows"]


def test_a_skipped_sample_fails_at_the_same_place_when_read_back(dataset, headrace_bin,
                                                                 tmp_path):
    copy = tmp_path / "data"
    shutil.copytree(dataset, copy)
    (copy / "images" / "000007.jpg").write_bytes(b"not a jpeg")
    config = pipeline(tmp_path / "p.yaml", copy)
    original, _ = run(headrace_bin, config, tmp_path, "original")
    out = tmp_path / "mat"
    proc = run_headrace(headrace_bin, "materialize", config, "--to", out)
    assert "39 samples (1 skipped)" in proc.stdout
    skipped = json.loads((out / "materialized.json").read_text())["sets"][0]["skipped"]
    assert [s["index"] for s in skipped] == [7] and skipped[0]["code"] == "unsupported_format"
    back, _ = run(headrace_bin, reader(tmp_path / "r.yaml", out), tmp_path, "back")
    assert back["errors"]["total"] == original["errors"]["total"] == 2
    assert back["batch_digests"] == original["batch_digests"]


def test_random_ops_are_refused_without_epochs_and_written_per_epoch(dataset, headrace_bin,
                                                                     tmp_path):
    config = pipeline(tmp_path / "flip.yaml", dataset, flip=True)
    out = tmp_path / "mat"
    refused = run_headrace(headrace_bin, "materialize", config, "--to", out, check=False)
    assert refused.returncode == 2
    assert "ops[3].image.flip" in refused.stderr and "--epochs" in refused.stderr
    assert not (out / "materialized.json").exists()

    run_headrace(headrace_bin, "materialize", config, "--to", out, "--epochs", "all")
    info = json.loads((out / "materialized.json").read_text())
    assert info["epochs"] == [0, 1] and info["random_ops"] == ["ops[3].image.flip"]
    assert [s["dir"] for s in info["sets"]] == ["epoch-0", "epoch-1"]
    epoch0 = members(out / "epoch-0" / "shard-000000.tar")
    epoch1 = members(out / "epoch-1" / "shard-000000.tar")
    images = [k for k in epoch0 if k.endswith(".image.npy")]
    assert len(images) == 40
    # Each epoch flips its own coins; the text is the same.
    assert any(epoch0[k] != epoch1[k] for k in images)
    assert all(epoch0[k] == epoch1[k] for k in epoch0 if k.endswith(".input_ids.npy"))

    original, _ = run(headrace_bin, config, tmp_path, "original")
    back, _ = run(headrace_bin, reader(tmp_path / "r.yaml", out), tmp_path, "back")
    assert back["batch_digests"] == original["batch_digests"]

    # A run the materialization cannot serve is refused naming the key.
    _, proc = run(headrace_bin, reader(tmp_path / "r3.yaml", out, epochs=3), tmp_path, "r3",
                  check=False)
    assert proc.returncode == 2 and "epochs:" in proc.stderr and "epoch 2" in proc.stderr
    _, proc = run(headrace_bin, reader(tmp_path / "rs.yaml", out, seed=7), tmp_path, "rs",
                  check=False)
    assert proc.returncode == 2 and "seed:" in proc.stderr and "seed 1" in proc.stderr


def test_bad_destinations_and_materializations_fail_before_work(dataset, headrace_bin,
                                                                tmp_path):
    config = pipeline(tmp_path / "p.yaml", dataset)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    proc = run_headrace(headrace_bin, "materialize", config, "--to", blocker / "out",
                        check=False)
    assert proc.returncode == 2 and "--to" in proc.stderr and "cannot write" in proc.stderr
    proc = run_headrace(headrace_bin, "materialize", config, check=False)
    assert proc.returncode == 2 and "usage" in proc.stderr

    # No materialized.json: named with the URI.
    empty = tmp_path / "empty"
    empty.mkdir()
    _, proc = run(headrace_bin, reader(tmp_path / "r.yaml", empty), tmp_path, "r", check=False)
    assert proc.returncode == 2
    assert f"{empty} holds no materialized.json" in proc.stderr

    out = tmp_path / "mat"
    run_headrace(headrace_bin, "materialize", config, "--to", out)
    # Ops on a materialized source: refused, naming the key.
    _, proc = run(headrace_bin, reader(tmp_path / "ops.yaml", out, extra="ops: [image.decode]"),
                  tmp_path, "ops", check=False)
    assert proc.returncode == 2 and "ops: source.materialized" in proc.stderr
    # A format this version does not read: says which, and what to do.
    info = json.loads((out / "materialized.json").read_text())
    info["version"] = 2
    (out / "materialized.json").write_text(json.dumps(info))
    _, proc = run(headrace_bin, reader(tmp_path / "v.yaml", out), tmp_path, "v", check=False)
    assert proc.returncode == 2
    assert "format version 2" in proc.stderr and "reads version 1" in proc.stderr


def test_a_materialization_that_lies_about_its_size_or_folder_is_refused(dataset, headrace_bin,
                                                                         tmp_path):
    """Believed, the counts ended in std::bad_alloc (SIGABRT) and the folder was followed
    out of the materialization; each is now a configuration error naming the field."""
    out = tmp_path / "mat"
    run_headrace(headrace_bin, "materialize", pipeline(tmp_path / "p.yaml", dataset), "--to", out)
    good = json.loads((out / "materialized.json").read_text())
    inner = out / "inner"  # its set folder ".." is `out`, a complete materialization
    inner.mkdir()
    cases = [(out, dict(good, dataset_samples=2 ** 31), "dataset_samples declares 2147483648"),
             (out, dict(good, dataset_samples=10 ** 12), "dataset_samples declares 1000000000000"),
             (inner, dict(good, sets=[dict(good["sets"][0], dir="..")]), "sets[0].dir '..' leaves")]
    for i, (where, info, message) in enumerate(cases):
        (where / "materialized.json").write_text(json.dumps(info))
        _, proc = run(headrace_bin, reader(tmp_path / f"r{i}.yaml", where), tmp_path, f"r{i}",
                      check=False)
        assert proc.returncode == 2, (message, proc.returncode, proc.stderr)
        assert message in proc.stderr and "source.materialized: " in proc.stderr


BUCKET = "headrace-materialized"


def test_materialize_to_s3_and_read_it_back(dataset, headrace_bin, tmp_path, moto_s3):
    env = moto_s3.env(tmp_path)
    moto_s3.client().create_bucket(Bucket=BUCKET)
    config = pipeline(tmp_path / "p.yaml", dataset)
    uri = f"s3://{BUCKET}/runs/vqa"
    # The bucket check lists the prefix: moto's signature check refuses query strings.
    with moto_s3.auth_off():
        run_headrace(headrace_bin, "materialize", config, "--to", uri, env=env)
        missing = run_headrace(headrace_bin, "materialize", config, "--to",
                               "s3://no-such-bucket-here/x", env=env, check=False)
        keys = {o["Key"] for o in moto_s3.client().list_objects_v2(Bucket=BUCKET)["Contents"]}
    assert missing.returncode == 2 and "--to s3://no-such-bucket-here/x" in missing.stderr
    assert {"runs/vqa/materialized.json", "runs/vqa/config.yaml",
            "runs/vqa/shard-000000.tar"} <= keys

    original, _ = run(headrace_bin, config, tmp_path, "original")
    back, _ = run(headrace_bin, reader(tmp_path / "r.yaml", uri), tmp_path, "back", env=env)
    assert back["batch_digests"] == original["batch_digests"]
