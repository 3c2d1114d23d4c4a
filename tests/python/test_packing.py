"""batch.pack: several samples per row of seq_len tokens (issue 27, exec/packer.h).

A real Qwen2-VL chain (images in a media list, 0 to 3 per sample, 1 to 6 turns; Qwen2's
tokenizer.json with the Qwen2-VL chat template, unpadded; vision.rope_index) run packed
and unpacked through `headrace.Loader`:
  - every sample exactly once per epoch, each packed segment equal to the same sample
    unpacked (input_ids, position ids, M-RoPE ids, patches, grids; labels with the first
    one ignored), cu_seqlens and samples_per_row consistent with the lengths;
  - the same rows for 1 and 2 CPU threads; resume from a state dict byte-identical, in
    this process and in a new one, and a resume without the window's state replays;
  - two ranks: disjoint, every sample once, equal batch counts;
  - a real PyTorch training step on a packed batch with a tiny model whose attention is
    block-diagonal by cu_seqlens: each segment's logits equal its sample's alone, and the
    packed loss equals the samples' loss (no label crosses a boundary);
  - config errors and per-sample errors (a cut through vision tokens).
"""
import hashlib
import json
import subprocess
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import headrace
import token_rows
from conftest import fetch_vocabs
from headrace.torch import TorchLoader

ops = headrace.ops
REPO = Path(__file__).resolve().parents[2]
TOKENIZER = REPO / "data/vocabs/qwen2/tokenizer.json"
TEMPLATE = (REPO / "tests/python/data/chat_templates/Qwen2-VL-7B-Instruct.jinja").read_text()
IMAGE_PAD = 151655
SAMPLES = 40
SEQ_LEN = 1024

fetch_vocabs()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("packing")
    (root / "images").mkdir()
    rng = np.random.default_rng(7)
    sizes = [(120, 90), (56, 56), (200, 60), (64, 160), (140, 140)]
    names = []
    for k, (w, h) in enumerate(sizes):
        name = f"images/p{k}.png"
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(root / name)
        names.append(name)
    lines = []
    for i in range(SAMPLES):
        n = int(rng.integers(0, 4))
        turns = []
        for t in range(int(rng.integers(1, 7))):
            question = f"Question {t} about case {i}: " + "why " * int(rng.integers(1, 40))
            if t == 0 and n:
                question = "<image>\n" * n + question
            turns += [("human", question), ("gpt", "Because. " * int(rng.integers(1, 30)))]
        lines.append(json.dumps({
            "id": f"s{i:02d}", "images": [names[(i + j) % len(names)] for j in range(n)],
            "conversations": [{"from": w, "value": v} for w, v in turns]}))
    (root / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    return root


def pipeline(root, pack=None, cpu_threads=2, pad=False, batch_size=6, overrides=None):
    fields = [{"name": "images", "kind": "image", "max_items": 4},
              {"name": "conversation", "kind": "conversation", "key": "conversations"}]
    chain = [ops.decode(field="images"),
             ops.smart_resize(preset="qwen2_vl", field="images", max_pixels=50176),
             ops.vision_patchify(preset="qwen2_vl", field="images"),
             ops.tokenize(tokenizer=str(TOKENIZER), chat_template=TEMPLATE, preset="qwen2_vl",
                          grid_field="image_grid_thw", pad=pad, max_length=4096)]
    if not pad:
        chain.append(ops.vision_rope_index(preset="qwen2_vl"))
    return headrace.Pipeline(
        source={"manifest": root / "manifest.jsonl", "root": root, "fields": fields},
        ops=chain, batch_size=batch_size, seed=3, epochs=2, cpu_threads=cpu_threads,
        memory_budget="256MiB", pack=pack, overrides=overrides)


def per_sample(batch):
    """The batch's samples by id: their tokens' fields (from the lengths, or the packed
    rows), patches and grids (by images_count)."""
    patches = token_rows.items(batch, "pixel_values", "pixel_values_lengths", "images_count")
    grids = token_rows.split(np.asarray(batch["image_grid_thw"]), np.asarray(batch["images_count"]))
    tokens = token_rows.tokens(batch, ("input_ids", "labels", "position_ids", "mrope_position_ids"))
    out = {}
    for i, sample_id in enumerate(batch["id"]):
        out[sample_id] = {name: tokens[name][i] for name in tokens}
        out[sample_id].update(patches=patches[i], grids=grids[i],
                              index=int(np.asarray(batch["index"])[i]))
    return out


def digest(batch):
    h = hashlib.sha1()
    for name in sorted(batch.keys()):
        value = batch[name]
        if isinstance(value, list):
            h.update((name + repr(value)).encode())
        else:
            a = np.asarray(value)
            h.update((name + str(a.shape) + str(a.dtype)).encode())
            h.update(a.tobytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def reference(dataset):
    """The samples unpacked, by id (epoch 0)."""
    out = {}
    with headrace.Loader(pipeline(dataset)) as loader:
        for batch in loader:
            assert not batch.errors, batch.errors
            out.update(per_sample(batch))
    assert len(out) == SAMPLES
    return out


@pytest.mark.parametrize("window", [0, 8, 100])
def test_each_segment_is_its_sample_and_every_sample_comes_once(dataset, reference, window):
    seen = []
    tokens = vision = 0
    with headrace.Loader(pipeline(dataset, {"seq_len": SEQ_LEN, "window": window})) as loader:
        batches = 0
        for batch in loader:
            batches += 1
            assert not batch.errors, batch.errors
            ids = np.asarray(batch["input_ids"])
            assert ids.ndim == 2 and ids.shape[1] == SEQ_LEN and ids.shape[0] >= 1
            cu = np.asarray(batch["cu_seqlens"])
            assert cu.dtype == np.int32 and cu[0] == 0 and cu[-1] == ids.size
            assert np.all(np.diff(cu) >= 0)
            per_row = np.asarray(batch["samples_per_row"])
            assert per_row.sum() == len(batch["id"]) == len(np.asarray(batch["index"]))
            labels = np.asarray(batch["labels"])
            used = np.zeros(ids.shape, bool)
            lengths = np.asarray(batch["input_ids_lengths"])
            s = 0
            for r, n in enumerate(per_row):
                width = int(lengths[s:s + n].sum())
                assert width <= SEQ_LEN
                used[r, :width] = True
                s += n
            assert np.all(labels[~used] == -100)
            assert len(set(ids[~used].tolist())) <= 1  # the tokenizer's pad id
            for sample_id, got in per_sample(batch).items():
                want = reference[sample_id]
                assert np.array_equal(got["input_ids"], want["input_ids"]), sample_id
                assert got["labels"][0] == -100 and np.array_equal(got["labels"][1:],
                                                                   want["labels"][1:])
                for name in ("position_ids", "mrope_position_ids", "patches", "grids"):
                    assert np.array_equal(got[name], want[name]), (sample_id, name)
                assert got["index"] == want["index"]
                seen.append(sample_id)
                tokens += len(want["input_ids"])
                vision += int((want["input_ids"] == IMAGE_PAD).sum())
        assert batches == len(loader)  # one packed batch per batch of samples
        stats = loader.stats()
    assert sorted(seen) == sorted(reference) and len(seen) == SAMPLES
    assert stats["pack_tokens"] == tokens and stats["pack_vision_tokens"] == vision > 0
    assert stats["pack_samples"] == SAMPLES and stats["pack_window_samples"] == 0
    # Every packed batch was planned from the sizes the samples' size pass told, its
    # samples computed in row order (exec/pack_planner.h).
    assert stats["pack_planned_batches"] == batches
    assert stats["pack_padding_tokens"] == stats["pack_rows"] * SEQ_LEN - tokens
    assert 0 < stats["pack_fill"] <= 1
    print(f"window {window}: {stats['pack_rows']} rows, fill {stats['pack_fill']:.3f}")


def test_a_larger_window_fills_rows_better(dataset):
    fill = {}
    for window in (0, 100):
        with headrace.Loader(pipeline(dataset, {"seq_len": SEQ_LEN, "window": window})) as loader:
            for _ in loader:
                pass
            fill[window] = loader.stats()["pack_fill"]
    assert fill[100] > fill[0], fill


def epoch_digests(loader):
    return [digest(b) for b in loader]


def test_the_same_rows_for_any_thread_count(dataset):
    runs = []
    for threads in (1, 2):
        with headrace.Loader(pipeline(dataset, {"seq_len": SEQ_LEN, "window": 8},
                                      cpu_threads=threads)) as loader:
            runs.append(epoch_digests(loader) + epoch_digests(loader))
    assert runs[0] == runs[1] and len(runs[0]) == 2 * 7


RESUME_SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import headrace, test_packing as t
state = json.loads(open(sys.argv[2]).read())
root = __import__("pathlib").Path(sys.argv[3])
with headrace.Loader(t.pipeline(root, {"seq_len": t.SEQ_LEN, "window": 8})) as loader:
    loader.load_state_dict(state)
    print(json.dumps([t.digest(b) for b in loader]))
"""


def test_resume_from_a_state_dict_is_byte_identical(dataset, tmp_path):
    pack = {"seq_len": SEQ_LEN, "window": 8}
    with headrace.Loader(pipeline(dataset, pack)) as loader:
        whole = epoch_digests(loader)
    assert len(whole) == 7
    for k in (1, 3, 5):
        with headrace.Loader(pipeline(dataset, pack)) as loader:
            it = iter(loader)
            for _ in range(k):
                next(it)
            state = loader.state_dict()
        assert state["batch_in_epoch"] == k
        assert state["pack"]["next_batch"] == k and state["pack"]["waiting"]
        with headrace.Loader(pipeline(dataset, pack)) as resumed:
            resumed.load_state_dict(state)
            assert epoch_digests(resumed) == whole[k:], k
        # Without the window's state, the epoch is replayed up to k: the same batches.
        state_without = dict(state, pack=None)
        with headrace.Loader(pipeline(dataset, pack)) as replayed:
            replayed.load_state_dict(state_without)
            assert epoch_digests(replayed) == whole[k:], k
    # In a new process, from the state as JSON.
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    out = subprocess.run([sys.executable, "-c", RESUME_SCRIPT, str(Path(__file__).parent),
                          str(path), str(dataset)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == whole[5:]


def test_two_ranks_pack_disjoint_samples_with_equal_batch_counts(dataset):
    """Each rank packs the samples it would get unpacked (EpochOrder deals equal batch
    counts, leaving out the last odd batch's samples as it does unpacked)."""
    pack = {"seq_len": SEQ_LEN, "window": 8}
    packed, unpacked, counts = [], [], []
    for rank in (0, 1):
        with headrace.Loader(pipeline(dataset, pack), rank=rank, world_size=2) as loader:
            ids = [i for batch in loader for i in batch["id"]]
            counts.append(len(loader))
        with headrace.Loader(pipeline(dataset), rank=rank, world_size=2) as loader:
            want = [i for batch in loader for i in batch["id"]]
        assert sorted(ids) == sorted(want) and len(set(ids)) == len(ids)
        packed += ids
        unpacked += want
    assert counts[0] == counts[1] == 3
    assert len(set(packed)) == len(packed) >= SAMPLES - 6


def test_batches_taken_on_demand_leave_joined(dataset, reference):
    """A Ray worker runs a packing pipeline on demand and leaves the packing to the rank:
    the batches it takes are the unpacked ones, their fields joined (not left as the
    samples' own rows, which only the local loader's packer reads)."""
    from headrace import _headrace
    spec = pipeline(dataset, {"seq_len": SEQ_LEN, "window": 8}).spec()
    impl = _headrace._Prepared.make(spec).run(0, 1, 0, 0, pinned=False, on_demand=True)
    seen = 0
    try:
        for k in (0, 1):
            impl.submit(k)
            fields, _, _, _, errors, _ = impl.take(k)
            assert not errors
            assert np.asarray(fields["input_ids"]).ndim == 1 and "cu_seqlens" not in fields
            for sample_id, got in per_sample(fields).items():
                want = reference[sample_id]
                for name in ("input_ids", "labels", "mrope_position_ids"):
                    np.testing.assert_array_equal(got[name], want[name])
                np.testing.assert_array_equal(got["patches"], want["patches"])
                seen += 1
    finally:
        impl.close()
    assert seen == 12


class TinyLM(torch.nn.Module):
    """Embedding, one causal attention layer masked block-diagonally by cu_seqlens (what
    FlashAttention's varlen kernel computes), a head; a packed row's segments never see
    each other."""

    def __init__(self, vocab=4096, dim=32):
        super().__init__()
        self.vocab = vocab
        self.embed = torch.nn.Embedding(vocab, dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, ids, cu_seqlens=None):
        x = self.embed(ids % self.vocab)  # [rows, L, D]
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        rows, length = ids.shape
        mask = torch.tril(torch.ones(length, length, dtype=torch.bool)).repeat(rows, 1, 1)
        if cu_seqlens is not None:
            segment = torch.zeros(rows * length, dtype=torch.long)
            segment[cu_seqlens[1:-1].long()] = 1
            segment = segment.cumsum(0).view(rows, length)
            mask &= segment[:, :, None] == segment[:, None, :]
        attn = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.head(x + attn)


def loss_sum(logits, labels):
    """Next-token cross entropy, summed: logits[t] predicts labels[t + 1]."""
    target = labels[:, 1:]
    target = torch.where(target < 0, -100, target % 4096).reshape(-1)
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                             target, ignore_index=-100, reduction="sum")


def test_a_training_step_on_a_packed_batch(dataset, reference):
    torch.manual_seed(0)
    model = TinyLM()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch_loader = TorchLoader(pipeline(dataset, {"seq_len": SEQ_LEN, "window": 8}))
    with torch_loader.loader:
        batch = next(iter(torch_loader))
        ids, labels, cu = batch["input_ids"], batch["labels"], batch["cu_seqlens"]
        assert isinstance(ids, torch.Tensor) and ids.dtype == torch.int64
        assert cu.dtype == torch.int32 and len(batch["id"]) > ids.shape[0]  # several per row
        logits = model(ids, cu)
        # Each segment's logits equal its sample's alone; the packed loss equals the sum
        # of the samples' losses (their first label ignored, so nothing crosses).
        with torch.no_grad():
            flat = logits.reshape(-1, logits.shape[-1])
            want_loss = 0.0
            lengths = batch["input_ids_lengths"].numpy()
            starts = []
            s = 0
            for r, n in enumerate(batch["samples_per_row"].tolist()):
                at = r * SEQ_LEN
                for _ in range(n):
                    starts.append(at)
                    at += lengths[s]
                    s += 1
            for i, sample_id in enumerate(batch["id"]):
                want = reference[sample_id]
                alone_ids = torch.as_tensor(want["input_ids"])[None]
                alone = model(alone_ids)
                got = flat[starts[i]:starts[i] + lengths[i]]
                assert torch.allclose(got, alone[0], atol=1e-5), sample_id
                alone_labels = torch.as_tensor(want["labels"])[None].clone()
                alone_labels[0, 0] = -100
                want_loss += float(loss_sum(alone, alone_labels))
        loss = loss_sum(logits, labels)
        assert abs(loss.item() - want_loss) <= 1e-3 * max(1.0, want_loss)
        before = model.head.weight.detach().clone()
        (loss / (labels != -100).sum()).backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters())
        optimizer.step()
        assert not torch.equal(before, model.head.weight)


def test_config_errors_name_the_key(dataset):
    with pytest.raises(headrace.ConfigError, match=r"text.tokenize \{pad: false\}"):
        headrace.Loader(pipeline(dataset, {"seq_len": 512}, pad=True))
    with pytest.raises(headrace.ConfigError, match="batch.pack.window"):
        pipeline(dataset, {"window": 4})
    with pytest.raises(headrace.ConfigError, match="batch.pack.overflow.*truncate"):
        pipeline(dataset, {"seq_len": 512, "overflow": "wrap"})
    with pytest.raises(headrace.ConfigError, match="batch.pack.seq_len"):
        pipeline(dataset, {"seq_len": -1})


def test_a_cut_through_vision_tokens_fails_the_sample_not_the_run(dataset, reference):
    # seq_len below some samples' vision tokens: those fail, named; the others pack, the
    # text-only ones longer than seq_len are truncated.
    # Both are data lost (issue 47): counted against errors.max_error_rate, which this
    # run raises to see them all; the truncated ones are named too (pack_truncated).
    seq_len = 30
    failed, truncated, delivered = {}, {}, set()
    pack = {"seq_len": seq_len, "window": 4}
    spec = pipeline(dataset, pack, overrides={"errors.max_error_rate": 1.0})
    with headrace.Loader(spec) as loader:
        for batch in loader:
            for e in batch.errors:
                (truncated if "pack_truncated" in e else failed)[e] = True
            delivered |= set(batch["id"])
        stats = loader.stats()
    cut = {i for i, r in reference.items()
           if len(r["input_ids"]) > seq_len and (r["input_ids"][seq_len:] == IMAGE_PAD).any()}
    assert cut and len(failed) == len(cut) == stats["pack_failed"]
    assert delivered == set(reference) - cut
    assert all("vision tokens" in e and "batch.pack.seq_len 30" in e for e in failed)
    assert stats["pack_truncated"] == len(truncated) == sum(
        1 for i, r in reference.items() if len(r["input_ids"]) > seq_len and i not in cut)
    assert stats["samples_failed"] == len(failed) + len(truncated)


def test_a_sample_that_fails_once_computed_is_named_and_the_others_come_once(dataset, reference,
                                                                           tmp_path):
    # One image whose header is whole and whose pixels are cut off: the size pass (the
    # header) tells its size, so the rows are planned with its samples, and their decode
    # fails. Each is named; its room in its row is padding; every other sample comes
    # once, equal to itself unpacked.
    root = tmp_path / "corrupt"
    shutil.copytree(dataset, root)
    png = (root / "images/p2.png").read_bytes()
    (root / "images/p2.png").write_bytes(png[:60])
    lines = (root / "manifest.jsonl").read_text().splitlines()
    broken = {json.loads(line)["id"] for line in lines if "images/p2.png" in line}
    broken_at = {i for i, line in enumerate(lines) if "images/p2.png" in line}
    assert broken
    failed, seen, padding = set(), [], 0
    spec = pipeline(root, {"seq_len": SEQ_LEN, "window": 8},
                    overrides={"errors.max_error_rate": 0.5})
    with headrace.Loader(spec) as loader:
        for batch in loader:
            for e in batch.errors:
                assert "corrupt_data" in e, e
                assert e.startswith("epoch 0, index "), e
                failed.add(int(e.split(", ")[1].split()[1]))
            ids = np.asarray(batch["input_ids"])
            lengths = np.asarray(batch["input_ids_lengths"])
            padding += ids.size - int(lengths.sum())
            for sample_id, got in per_sample(batch).items():
                assert np.array_equal(got["input_ids"], reference[sample_id]["input_ids"])
                assert np.array_equal(got["patches"], reference[sample_id]["patches"])
                seen.append(sample_id)
            if len(seen) >= SAMPLES - len(broken):
                break  # the first epoch
        stats = loader.stats()
    assert failed == broken_at
    assert sorted(seen) == sorted(set(reference) - broken)
    assert stats["pack_planned_batches"] > 0 and padding == stats["pack_padding_tokens"]


def budget_pipeline(root, max_tokens=600, window=8, cpu_threads=2):
    return headrace.Pipeline(
        source=spec_source(root), ops=spec_ops(), batch_size=6, seed=3, epochs=2,
        cpu_threads=cpu_threads, memory_budget="256MiB", max_tokens=max_tokens,
        pack={"window": window})


def spec_source(root):
    return {"manifest": root / "manifest.jsonl", "root": root,
            "fields": [{"name": "images", "kind": "image", "max_items": 4},
                       {"name": "conversation", "kind": "conversation", "key": "conversations"}]}


def spec_ops():
    return [ops.decode(field="images"),
            ops.smart_resize(preset="qwen2_vl", field="images", max_pixels=50176),
            ops.vision_patchify(preset="qwen2_vl", field="images"),
            ops.tokenize(tokenizer=str(TOKENIZER), chat_template=TEMPLATE, preset="qwen2_vl",
                         grid_field="image_grid_thw", pad=False, max_length=4096),
            ops.vision_rope_index(preset="qwen2_vl")]


def test_max_tokens_batches_hold_whole_samples_within_the_budget(dataset, reference):
    seen = []
    with headrace.Loader(budget_pipeline(dataset)) as loader:
        batches = 0
        for batch in loader:
            batches += 1
            assert not batch.errors, batch.errors
            ids = np.asarray(batch["input_ids"])
            lengths = np.asarray(batch["input_ids_lengths"])
            assert ids.ndim == 1 and len(ids) == lengths.sum() <= 600
            assert np.array_equal(np.asarray(batch["cu_seqlens"]),
                                  np.concatenate([[0], np.cumsum(lengths)]))
            for sample_id, got in per_sample(batch).items():
                want = reference[sample_id]
                for name in ("input_ids", "labels", "position_ids", "mrope_position_ids",
                             "patches", "grids"):
                    assert np.array_equal(got[name], want[name]), (sample_id, name)
                seen.append(sample_id)
        stats = loader.stats()
        assert batches > len(loader)  # more token batches than batches of 6 samples
    assert sorted(seen) == sorted(reference)
    assert stats["pack_rows"] == batches and 0 < stats["pack_fill"] <= 1
    print(f"max_tokens 600: {batches} batches, fill {stats['pack_fill']:.3f}")


def test_max_tokens_resumes_byte_identically_between_two_token_batches(dataset):
    spec = budget_pipeline(dataset)
    with headrace.Loader(spec) as loader:
        whole = epoch_digests(loader)
    resumed_any_mid_batch = False
    for k in (1, 2, 4, len(whole) - 2):
        with headrace.Loader(spec) as loader:
            it = iter(loader)
            for _ in range(k):
                next(it)
            state = loader.state_dict()
        resumed_any_mid_batch |= state["pack"]["delivered"] > 0
        with headrace.Loader(spec) as resumed:
            resumed.load_state_dict(state)
            assert epoch_digests(resumed) == whole[k:], k
    assert resumed_any_mid_batch  # some state fell between two token batches of one input


def test_max_tokens_gives_the_same_batches_for_any_thread_count(dataset):
    runs = []
    for threads in (1, 2):
        with headrace.Loader(budget_pipeline(dataset, cpu_threads=threads)) as loader:
            runs.append(epoch_digests(loader))
    assert runs[0] == runs[1]


def test_max_tokens_and_pack_are_exclusive(dataset):
    with pytest.raises(headrace.ConfigError, match="batch.max_tokens"):
        headrace.Pipeline(source=spec_source(dataset), ops=spec_ops(), max_tokens=100,
                          pack={"seq_len": 100})
