"""source.mix end to end: a blend of a manifest, tar shards and a Parquet table through one
chain of ops. Each sample carries its entry's name; every sample of every entry is read
(all_exhausted) with the pixels and tokens the same sample has from its own source alone;
runs are deterministic, resume is exact, and stats() counts per entry."""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import headrace

REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("HEADRACE_BIN", str(REPO / "build" / "headrace"))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix")
    for name, n, seed, extra in (("a", 40, 1, []),
                                 ("b", 48, 2, ["--shards", "--shard-size", "60000"]),
                                 ("c", 24, 3, [])):
        subprocess.run([BIN, "make-sample", "--out", str(root / name), "--samples", str(n),
                        "--seed", str(seed), "--size", "96x72", *extra],
                       check=True, capture_output=True)
    # c as a Parquet table (id, image bytes, conversations as JSON), two row groups.
    rows = [json.loads(line) for line in (root / "c" / "manifest.jsonl").read_text().splitlines()]
    table = pa.table({
        "id": [r["id"] for r in rows],
        "image": pa.array([(root / "c" / r["image"]).read_bytes() for r in rows], type=pa.binary()),
        "conversations": [json.dumps(r["conversations"]) for r in rows],
    })
    pq.write_table(table, root / "c.parquet", row_group_size=12)
    shards = sorted((root / "b" / "shards").glob("shard-*.tar"))
    assert len(shards) >= 2
    return root, f"{root}/b/shards/shard-{{000000..{len(shards) - 1:06d}}}.tar"


ENTRIES = ("vqa", "ocr", "table")


def sources(data):
    root, shards = data
    return {"vqa": {"manifest": str(root / "a" / "manifest.jsonl")},
            "ocr": {"shards": shards},
            "table": {"parquet": str(root / "c.parquet")}}


def pipeline(data, source, **kw):
    ops = headrace.ops
    root, _ = data
    kw.setdefault("batch_size", 8)
    kw.setdefault("seed", 3)
    return headrace.Pipeline(
        source=source,
        ops=[ops.decode(), ops.resize(shorter_side=48), ops.center_crop(40), ops.normalize(),
             ops.tokenize(root / "a" / "tokenizer.model", max_length=40)],
        cpu_threads=2, memory_budget="96MiB", epochs=1, **kw)


def mix(data, until="all_exhausted", weights=(0.5, 0.3, 0.2)):
    s = sources(data)
    return {"mix": [{"name": n, "weight": w, **s[n]} for n, w in zip(ENTRIES, weights)],
            "until": until}


def samples(loader):
    """(source, id) -> (image bytes, input_ids bytes), and the order they came in."""
    out, order = {}, []
    for batch in loader:
        image, ids = np.asarray(batch["image"]), np.asarray(batch["input_ids"])
        names = batch["source"] if "source" in batch else [None] * len(batch["id"])
        for row, (name, sid) in enumerate(zip(names, batch["id"])):
            order.append((name, sid))
            out.setdefault((name, sid), []).append((image[row].tobytes(), ids[row].tobytes()))
    return out, order


def test_a_blend_reads_every_entry_with_the_values_of_its_own_source(data):
    blended, order = samples(headrace.Loader(pipeline(data, mix(data))))
    for name, source in sources(data).items():
        alone, _ = samples(headrace.Loader(pipeline(data, source, shuffle=False)))
        mine = {sid: v for (n, sid), v in blended.items() if n == name}
        # all_exhausted: every sample of every entry, the small ones repeated.
        assert set(mine) == {sid for _, sid in alone}, name
        for sid, values in mine.items():
            assert all(v == alone[(None, sid)][0] for v in values), (name, sid)
    counts = {n: sum(1 for e, _ in order if e == n) for n in ENTRIES}
    total = len(order)
    # Proportions within the documented bound (2 + 64 w) of the weights.
    for n, w in zip(ENTRIES, (0.5, 0.3, 0.2)):
        assert abs(counts[n] - w * total) < 2 + 64 * w, (counts, total)
    # The entry that ends the epoch read each of its samples once.
    assert counts["vqa"] == 40 or counts["ocr"] == 48 or counts["table"] == 24


def test_first_exhausted_reads_no_sample_twice_and_runs_are_deterministic(data):
    p = pipeline(data, mix(data, until="first_exhausted"))
    _, first = samples(headrace.Loader(p))
    _, again = samples(headrace.Loader(p))
    assert first == again
    assert len(first) == len(set(first))
    _, other_seed = samples(headrace.Loader(pipeline(data, mix(data, until="first_exhausted"),
                                                     seed=4)))
    assert other_seed != first


def test_resume_mid_epoch_continues_the_blend_exactly(data):
    p = pipeline(data, mix(data))
    full = [b["id"] + b["source"] for b in headrace.Loader(p)]
    loader = headrace.Loader(p)
    it = iter(loader)
    seen = [next(it) for _ in range(5)]
    assert [b["id"] + b["source"] for b in seen] == full[:5]
    state = loader.state_dict()
    loader.close()
    resumed = headrace.Loader(pipeline(data, mix(data)), state_dict=state)
    assert [b["id"] + b["source"] for b in resumed] == full[5:]


def test_stats_count_samples_errors_and_bytes_per_entry(data):
    loader = headrace.Loader(pipeline(data, mix(data)))
    _, order = samples(loader)
    stats = loader.stats()
    assert sum(stats[f"source.{n}.samples"] for n in ENTRIES) == len(order)
    for n in ENTRIES:
        assert stats[f"source.{n}.samples"] == sum(1 for e, _ in order if e == n)
        assert stats[f"source.{n}.errors"] == 0
        assert stats[f"source.{n}.bytes_read"] > 0, n


def test_bad_mixes_are_config_errors_naming_the_key(data):
    s = sources(data)
    cases = [
        ({"mix": [{"name": "x", "weight": -1, **s["vqa"]}]}, "source.mix[0].weight"),
        ({"mix": [{"name": "x", **s["vqa"]}, {"name": "x", **s["ocr"]}]}, "source.mix[1].name"),
        ({"mix": [{"name": "x"}]}, "source.mix[0].manifest"),
        ({"mix": [{"name": "x", **s["vqa"]}], "until": "never"}, "source.until"),
    ]
    for source, key in cases:
        with pytest.raises(headrace.ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
            headrace.Loader(pipeline(data, source)).batches_per_epoch


def test_the_example_runs_from_the_command_line(tmp_path):
    for name, n, extra in (("chat", 60, []), ("docs", 30, ["--seed", "7", "--shards"]),
                           ("text", 40, ["--seed", "9"])):
        subprocess.run([BIN, "make-sample", "--out", f"data/mix/{name}", "--samples", str(n),
                        "--size", "96x72", *extra], cwd=tmp_path, check=True, capture_output=True)
    subprocess.run([BIN, "run", str(REPO / "examples" / "mix.yaml"), "--report", "r.json",
                    "--quiet", "--set", "trainer.step_ms=0"], cwd=tmp_path, check=True,
                   capture_output=True)
    report = json.loads((tmp_path / "r.json").read_text())
    entries = {e["name"]: e for e in report["sources"]}
    assert list(entries) == ["chat", "docs", "text"]
    assert sum(e["samples"] for e in entries.values()) == report["samples"]
    # first_exhausted at 0.6: chat's 60 samples end the epoch (100 positions, 6 batches).
    assert entries["chat"]["samples"] == 60 and report["samples"] == 100
    assert all(e["bytes_read"] > 0 for e in entries.values())
    assert report["source"].startswith("mix of 3: chat (manifest")


def test_a_resume_with_new_weights_continues_every_entry_where_it_was(data):
    old, new = (0.5, 0.3, 0.2), (0.1, 0.2, 0.7)
    full = [list(zip(b["source"], b["id"]))
            for b in headrace.Loader(pipeline(data, mix(data, "first_exhausted", old)))]
    loader = headrace.Loader(pipeline(data, mix(data, "first_exhausted", old)))
    it = iter(loader)
    before = [list(zip(b["source"], b["id"])) for b in (next(it) for _ in range(3))]
    assert before == full[:3]
    state = loader.state_dict()
    loader.close()
    assert state["mix_weights"] == list(old) and len(state["blend_picks"]) == 3
    assert sum(state["blend_picks"]) == 24  # 3 batches of 8
    resumed = headrace.Loader(pipeline(data, mix(data, "first_exhausted", new)), state_dict=state)
    after = [s for b in resumed for s in zip(b["source"], b["id"])]
    epoch = [s for b in before for s in b] + after
    assert len(epoch) == len(set(epoch))  # first_exhausted: no sample twice, across the change
    flat_full = [s for b in full for s in b]
    for name in ENTRIES:
        # Each entry's samples, before and after the change, follow its own order.
        mine = [sid for n, sid in epoch if n == name]
        own = [sid for n, sid in flat_full if n == name]
        common = min(len(mine), len(own))
        assert mine[:common] == own[:common], name
    # After the change the new weights rule: the table entry (0.7) leads.
    counts = {n: sum(1 for e, _ in after if e == n) for n in ENTRIES}
    assert counts["table"] > counts["vqa"] and counts["table"] > counts["ocr"], counts
    # A resume of a state taken after the change, with the same new weights, is exact.
    second = headrace.Loader(pipeline(data, mix(data, "first_exhausted", new)), state_dict=state)
    it = iter(second)
    head = [s for b in (next(it) for _ in range(2)) for s in zip(b["source"], b["id"])]
    again = headrace.Loader(pipeline(data, mix(data, "first_exhausted", new)),
                            state_dict=second.state_dict())
    second.close()
    assert head + [s for b in again for s in zip(b["source"], b["id"])] == after


def test_blend_picks_past_the_epoch_are_refused(data):
    # Before (issue 50): picks of 2^62 were taken as where each entry continues.
    loader = headrace.Loader(pipeline(data, mix(data, "first_exhausted")))
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    loader.close()
    lying = dict(state, blend_picks=[2 ** 62, 0, 0])
    with pytest.raises(headrace.ConfigError, match=r"state dict: blend_picks: entry 0's picks "
                                                   r"4611686018427387904 \(allowed: >= 0"):
        headrace.Loader(pipeline(data, mix(data, "first_exhausted")), state_dict=lying)
    with pytest.raises(headrace.ConfigError, match=r"state dict: blend_picks: entry 0's picks"):
        headrace.Loader(pipeline(data, mix(data, "first_exhausted", (0.1, 0.2, 0.7))),
                        state_dict=lying)  # new weights: the picks are where entries go on
    with pytest.raises(headrace.ConfigError, match=r"blend_picks: 2 counts for a blend of 3"):
        headrace.Loader(pipeline(data, mix(data, "first_exhausted")),
                        state_dict=dict(state, blend_picks=[4, 4]))
