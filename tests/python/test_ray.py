"""headrace.ray on a real multi-node Ray cluster (ray.cluster_utils.Cluster on 127.0.0.1):
one "trainer" head node and two CPU nodes offering a custom ``headrace_cpu`` resource, real
worker and coordinator actors, a real PyTorch loop. One cluster for the whole module."""
import collections
import hashlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import ray  # noqa: F401  (a missing ray fails here: it is a test dependency)
from ray.cluster_utils import Cluster

import headrace
import headrace.ray as hray
from conftest import rest_of_epoch

CPU_NODES = 2
WORKER = {"CPU": 1, "headrace_cpu": 1}
REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("HEADRACE_BIN", str(REPO / "build" / "headrace"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster():
    # The dashboard serves Ray's state API (ray.util.state: which process references
    # which object, its size), which the ownership test reads; on a port of its own so
    # that another Ray on this machine cannot take it.
    c = Cluster(initialize_head=True, connect=False, head_node_args={
        "num_cpus": 2, "resources": {"trainer": 2}, "include_dashboard": True,
        "dashboard_port": free_port(), "object_store_memory": 96 << 20})
    for _ in range(CPU_NODES):
        c.add_node(num_cpus=2, resources={"headrace_cpu": 2}, object_store_memory=96 << 20)
    c.wait_for_nodes()
    ray.init(address=c.address, namespace="headrace-test", log_to_driver=False)
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture
def pipeline(make_pipeline):
    return make_pipeline(epochs=2)  # 48 samples, batch 8: 6 batches per epoch


def fields(batch):
    """Each field's bytes (strings as text), by name."""
    return {name: repr(value).encode() if isinstance(value, list) else np.asarray(value).tobytes()
            for name, value in batch.items()}


def digest(batch):
    """Everything a batch holds: each field's bytes (strings as text), epoch and indices."""
    h = hashlib.sha256()
    for name, value in sorted(fields(batch).items()):
        h.update(name.encode())
        h.update(value)
    return (batch.epoch, batch.index, batch.global_index, h.hexdigest())


def local_run(pipeline, rank=0, world_size=1, epochs=2):
    loader = headrace.Loader(pipeline, rank=rank, world_size=world_size)
    return [digest(b) for _ in range(epochs) for b in loader]


def node_of(handle):
    return ray.get(handle.info.remote())["node_id"]


def wait_for(predicate, what, timeout=60):
    """Polls Ray's state until ``predicate()`` holds (Ray gives no event for it)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def live_workers(loader):
    return [w for w in loader.pool_stats()["workers"] if w["state"] == "live"]


def cpu_nodes():
    return {n["NodeID"] for n in ray.nodes() if n["Alive"] and "headrace_cpu" in n["Resources"]}


def test_spread_puts_workers_on_different_cpu_nodes_and_pack_on_one(cluster, pipeline):
    for placement, nodes in (("spread", CPU_NODES), ("pack", 1)):
        loader = hray.Loader(pipeline, workers=2, placement=placement, worker_resources=WORKER)
        try:
            wait_for(lambda: len(live_workers(loader)) == 2, "two live workers")
            placed = {w["node_id"] for w in live_workers(loader)}
            assert len(placed) == nodes, (placement, loader.pool_stats())
            assert placed <= cpu_nodes()  # only nodes with headrace_cpu, not the trainer
            assert next(iter(loader))["image"].shape == (8, 3, 56, 56)
        finally:
            loader.close()


def test_no_batch_is_owned_by_or_passes_through_the_coordinator(cluster, pipeline):
    from ray.util.state import list_actors, list_objects

    # The rank in an actor of its own, so that the driver (this test) is a third process:
    # a batch must be neither the coordinator's nor the driver's.
    class Rank:
        def __init__(self, pipeline, worker):
            import headrace.ray
            self.loader = headrace.ray.Loader(pipeline, rank=0, world_size=1, workers=2,
                                              worker_resources=worker, prefetch=4)

        def live_workers(self):
            return sum(w["state"] == "live" for w in self.loader.pool_stats()["workers"])

        def fill_window(self):
            """Consumes one batch, then waits until the 4 batches of its full request
            window are computed; returns them with this process's pid."""
            import os
            import ray
            self.it = iter(self.loader)
            self.first = next(self.it)
            refs = [entry[3] for entry in self.loader._impl._pending]
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=60)
            return {"pid": os.getpid(), "window": [r.hex() for r in refs],
                    "ready": len(ready),
                    "coordinator_pid": ray.get(self.loader._coordinator.pid.remote())}

        def close(self):
            self.loader.close()

    sample = next(iter(headrace.Loader(pipeline)))
    batch_bytes = sum(np.asarray(sample[name]).nbytes for name in sample
                      if not isinstance(sample[name], list))
    rank = ray.remote(Rank).options(resources={"trainer": 1}, num_cpus=0).remote(
        pipeline, WORKER)
    try:
        wait_for(lambda: ray.get(rank.live_workers.remote()) == 2, "two live workers")
        got = ray.get(rank.fill_window.remote(), timeout=120)
        assert got["ready"] == len(got["window"]) == 4
        actors = list_actors(filters=[("state", "=", "ALIVE")])
        workers = {a.actor_id for a in actors if a.class_name == "Worker"}
        classes = {a.actor_id: a.class_name for a in actors}
        # Not raise_on_missing_output: it compares the raylets' count of references with
        # the rows after Ray merges them, which differ by a row now and then. What this
        # test needs is checked below: the window's objects and the coordinator's rows.
        objects = list_objects(limit=10_000, raise_on_missing_output=False)
    finally:
        ray.get(rank.close.remote())
        ray.kill(rank)
    coordinator = got["coordinator_pid"]
    assert os.getpid() != got["pid"]  # the driver is not the rank
    assert {a.pid for a in actors if a.class_name == "Coordinator"} == {coordinator}
    assert len(workers) == 2
    # Each row: one process's reference to one object (a row may not know the size).
    # Batch-sized: at least the arrays.
    big = {o.object_id for o in objects if (o.object_size or 0) >= batch_bytes}
    batches = {i: [o for o in objects if o.object_id == i] for i in big}
    assert set(got["window"]) <= set(batches), (got, batches.keys())
    for object_id, rows in batches.items():
        # Computed by a worker: the object is the return value of a worker actor's task
        # (a return's ID starts with its task's ID, which holds the actor's ID), not of
        # the coordinator's.
        task = ray.TaskID(bytes.fromhex(object_id)[:ray.TaskID.size()])
        creator = task.actor_id().hex()
        assert creator in workers, f"batch {object_id} was made by actor {creator} " \
            f"({classes.get(creator, 'not an actor')}), not by a worker ({sorted(workers)})"
        # Only the rank references it: neither the coordinator nor the driver.
        assert {r.pid for r in rows} == {got["pid"]}, (object_id, rows)
    # The rank owns its window: only an object's owner knows the status of the task that
    # makes it (a borrower's row says NIL; so does the batch it consumed, whose ref it
    # dropped while its arrays keep the object pinned).
    for object_id in got["window"]:
        assert [r.task_status for r in batches[object_id]] == ["FINISHED"], batches[object_id]
    # The coordinator's own objects are metadata: worker handles, small dicts.
    mine = [o for o in objects if o.pid == coordinator]
    assert mine and max(o.object_size or 0 for o in mine) < batch_bytes // 10, mine


def test_a_ranks_batches_are_byte_identical_to_the_local_loaders(cluster, pipeline):
    loader = hray.Loader(pipeline, rank=1, world_size=2, workers=2, worker_resources=WORKER)
    try:
        assert len(loader) == 3
        got = [digest(b) for _ in range(2) for b in loader]
        stats = loader.stats()
    finally:
        loader.close()
    assert got == local_run(pipeline, rank=1, world_size=2)
    assert stats["batches"] == 6 and 0 <= stats["wait_time_ratio"] <= 1
    # Live workers are on CPU nodes (one may still be starting: its node is not known yet).
    assert {w["node_id"] for w in stats["workers"] if w["state"] == "live"} <= cpu_nodes()
    assert stats["bytes_moved"] > 0 and stats["reassignments"] == 0


def balanced_pipeline(py_sample, balance, **grouping):
    """The sample dataset tokenized, in batches of 4, its steps dealt by `balance`."""
    ops = headrace.ops
    return headrace.Pipeline(
        source=py_sample / "manifest.jsonl",
        ops=[ops.tokenize(py_sample / "tokenizer.model", max_length=64, pad=False)],
        batch_size=4, seed=3, cpu_threads=2, memory_budget="64MiB", epochs=2,
        balance=balance, **grouping)


# batch.balance with a packing window: each step's rows are dealt over the ranks.
ROWS_DEALT = dict(balance={"cost": "tokens", "every_rank": "image"},
                  pack={"seq_len": 96, "window": 2})


def test_balanced_steps_from_workers_are_each_ranks_local_steps(cluster, py_sample):
    """batch.balance (issue 49) on Ray: the worker that computes rank r's batch of a step
    deals the step over the trainers' ranks by cost, as rank r's own local run deals it,
    and with every_rank flags it (dummy_kinds) as that run does. With batch.pack the
    workers' batches are the dealt shares and the rank packs them: its packed batches,
    dummy_kinds included, are the local run's too."""

    def balanced(balance, **grouping):
        return balanced_pipeline(py_sample, balance, **grouping)

    dealt = balanced("tokens")
    safe = balanced({"cost": "tokens", "every_rank": "image"})
    packed = balanced("tokens", pack={"seq_len": 96})
    packed_safe = balanced({"cost": "tokens", "every_rank": "image"}, pack={"seq_len": 96})
    # With a window the step's rows are dealt: each worker plans the rows as every rank
    # does and computes the rows' samples of the rank asking; the rank lays them out.
    rows = balanced(**ROWS_DEALT)
    specs = {"dealt": dealt, "safe": safe, "packed": packed, "packed_safe": packed_safe,
             "rows": rows}
    for name, spec in specs.items():
        for rank in range(2):
            loader = hray.Loader(spec, rank=rank, world_size=2, workers=2,
                                 worker_resources=WORKER)
            got, fields = [], set()
            try:
                for _ in range(2):
                    for b in loader:
                        got.append(digest(b))
                        fields |= set(b)
            finally:
                loader.close()
            assert ("dummy_kinds" in fields) == (spec in (safe, packed_safe, rows))
            assert "sample_kinds" not in fields, "the workers' kinds stay inside the rank"
            if spec in (dealt, safe):
                assert len(got) == 12
            assert got == local_run(spec, rank=rank, world_size=2), f"{name}, rank {rank}"
    for spec, unbalanced in ((dealt, balanced(None)),
                             (packed, balanced(None, pack={"seq_len": 96})),
                             (rows, balanced(None, pack={"seq_len": 96, "window": 2}))):
        assert local_run(spec, rank=0, world_size=2) != local_run(unbalanced, rank=0,
                                                                  world_size=2)


def test_a_size_index_built_by_ray_tasks_is_the_one_built_locally(cluster, py_sample,
                                                                   tmp_path):
    """headrace.ray.build_size_index (issue 49): Ray tasks on the CPU nodes size a range
    of samples each, the driver joins their parts: the same bytes as the local build
    (and so as `headrace index sizes`), and a balanced run dealt from it deals as one
    that sizes each step."""
    ops = headrace.ops

    def balanced(balance):
        return headrace.Pipeline(
            source=py_sample / "manifest.jsonl",
            ops=[ops.tokenize(py_sample / "tokenizer.model", max_length=64, pad=False)],
            batch_size=4, seed=3, cpu_threads=2, epochs=2, balance=balance)

    path = tmp_path / "ray.idx"
    indexed = balanced({"cost": "tokens", "index": str(path)})
    summary = hray.build_size_index(indexed, samples_per_task=10,
                                    task_resources={"headrace_cpu": 1})
    assert summary["path"] == str(path)
    assert (summary["samples"], summary["untold"], summary["tasks"]) == (48, 0, 5)
    local = headrace.build_size_index(indexed, tmp_path / "local.idx", threads=2)
    assert local["fingerprint"] == summary["fingerprint"]
    assert path.read_bytes() == (tmp_path / "local.idx").read_bytes()
    for rank in range(2):
        assert local_run(indexed, rank=rank, world_size=2) == \
            local_run(balanced("tokens"), rank=rank, world_size=2)
    with pytest.raises(headrace.ConfigError, match="samples_per_task"):
        hray.build_size_index(indexed, samples_per_task=0)


def test_ragged_batches_from_workers_are_the_local_loaders(cluster, py_sample):
    """Unpadded tokens (input_ids [?] with input_ids_lengths) through Ray's object store:
    every batch's shapes and bytes as the local loader makes them."""
    ops = headrace.ops
    ragged = headrace.Pipeline(
        source=py_sample / "manifest.jsonl",
        ops=[ops.tokenize(py_sample / "tokenizer.model", max_length=48, pad=False)],
        batch_size=8, seed=1, cpu_threads=2, memory_budget="64MiB", epochs=2)

    def shapes(b):
        return digest(b) + (tuple(b["input_ids"].shape), tuple(b["input_ids_lengths"].shape))

    loader = hray.Loader(ragged, workers=2, worker_resources=WORKER)
    try:
        got = [shapes(b) for _ in range(2) for b in loader]
    finally:
        loader.close()
    local = headrace.Loader(ragged)
    assert got == [shapes(b) for _ in range(2) for b in local]
    assert len({s[-2] for s in got}) > 1, "the token counts vary from batch to batch"


@pytest.mark.parametrize("mode", ["pack", "max_tokens"])
def test_a_rank_packs_the_workers_batches_as_the_local_loader_does(cluster, py_sample, mode):
    """batch.pack (and batch.max_tokens) over Ray: the workers compute the unpacked
    batches, the rank packs them in order with the engine's packer; rows, cu_seqlens and
    ids as the local loader's for the same rank, and a state taken mid-epoch resumes
    locally byte-identically."""
    ops = headrace.ops
    grouping = (dict(pack={"seq_len": 64, "window": 6}) if mode == "pack"
                else dict(max_tokens=100, pack={"window": 6}))
    packed = headrace.Pipeline(
        source=py_sample / "manifest.jsonl",
        ops=[ops.tokenize(py_sample / "tokenizer.model", max_length=48, pad=False)],
        batch_size=8, seed=1, cpu_threads=2, memory_budget="64MiB", epochs=2, **grouping)
    local_loader = headrace.Loader(packed, rank=1, world_size=2)
    local = [digest(b) for _ in range(2) for b in local_loader]
    loader = hray.Loader(packed, rank=1, world_size=2, workers=2, worker_resources=WORKER)
    try:
        got = []
        for batch in loader:  # epoch 0
            if mode == "pack":
                assert batch["input_ids"].shape[1] == 64 and len(batch["cu_seqlens"]) > 1
            else:
                assert len(np.asarray(batch["input_ids"])) <= 100
            got.append(digest(batch))
            if len(got) == 2:
                state = loader.state_dict()
        got += [digest(b) for b in loader]  # epoch 1
        stats = loader.stats()
    finally:
        loader.close()
    assert got == local
    assert 0 < stats["pack_fill"] <= 1
    if mode == "pack":
        assert state["pack"]["next_batch"] == 2
    resumed = headrace.Loader(packed, rank=1, world_size=2, state_dict=state)
    assert [digest(b) for _ in range(2) for b in resumed] == local[2:]


def test_a_rank_counts_the_samples_its_packer_cuts_as_the_local_loader_does(cluster, py_sample):
    """Samples longer than seq_len, cut by the rank's packer, are failed samples of the
    run's error budget (issue 47): as many as the local loader counts, each named in its
    batch; past errors.max_error_rate the run fails."""
    ops = headrace.ops

    def pipe(rate):
        return headrace.Pipeline(
            source=py_sample / "manifest.jsonl",
            ops=[ops.tokenize(py_sample / "tokenizer.model", max_length=48, pad=False)],
            batch_size=8, seed=1, cpu_threads=2, memory_budget="64MiB", epochs=1,
            pack={"seq_len": 24, "window": 0}, overrides={"errors.max_error_rate": rate})

    with headrace.Loader(pipe(1.0)) as local_loader:
        want = [e for b in local_loader for e in b.errors]
        local = local_loader.stats()
    assert want and local["samples_failed"] == local["pack_truncated"] == len(want)
    loader = hray.Loader(pipe(1.0), workers=2, worker_resources=WORKER)
    try:
        got = [e for b in loader for e in b.errors]
        stats = loader.stats()
    finally:
        loader.close()
    assert sorted(got) == sorted(want) and all("pack_truncated" in e for e in got)
    assert stats["samples_failed"] == len(want)
    loader = hray.Loader(pipe(0.0), workers=2, worker_resources=WORKER)
    try:
        with pytest.raises(headrace.Error, match="too many bad samples"):
            for _ in loader:
                pass
    finally:
        loader.close()


@pytest.mark.parametrize("packed", [False, True])
def test_an_elastic_resume_on_workers_is_the_local_loaders(cluster, py_sample, packed):
    """A state of 2 ranks taken mid-epoch, merged, resumes on 3 ranks that the workers
    serve: each rank's rest of the epoch and its next epoch are those of the local loader
    resumed from the same state, and no sample comes twice in the epoch (with packing,
    also the samples that were waiting in the packers' windows)."""
    ops = headrace.ops
    grouping = dict(pack={"seq_len": 64, "window": 6}) if packed else {}
    pipe = headrace.Pipeline(
        source=py_sample / "manifest.jsonl",
        ops=[ops.tokenize(py_sample / "tokenizer.model", max_length=48, pad=False)],
        batch_size=4, seed=1, cpu_threads=2, memory_budget="64MiB", epochs=2, **grouping)
    before, states = [], []
    for rank in (0, 1):
        loader = headrace.Loader(pipe, rank=rank, world_size=2)
        it = iter(loader)
        before += [int(i) for _ in range(2) for i in np.asarray(next(it)["index"])]
        states.append(loader.state_dict())
        loader.close()
    merged = headrace.merge_state_dicts(states)

    def run(make):
        out = []
        for rank in range(3):
            loader = make(rank)
            loader.load_state_dict(merged)
            out.append(([digest(b) for b in loader], [digest(b) for b in loader]))
        return out

    local = run(lambda rank: headrace.Loader(pipe, rank=rank, world_size=3))
    opened = []

    def on_ray(rank):
        opened.append(hray.Loader(pipe, rank=rank, world_size=3, workers=2,
                                  worker_resources=WORKER))
        return opened[-1]

    try:
        got = run(on_ray)
        pool = opened[0].pool_stats()
    finally:
        for loader in opened:
            loader.close()
    assert got == local
    assert all(rest and after for rest, after in got)
    assert len(pool["workers"]) == 2
    rest_indices = []
    for rank in range(3):
        loader = headrace.Loader(pipe, rank=rank, world_size=3)
        loader.load_state_dict(merged)
        rest_indices += [int(i) for b in loader for i in np.asarray(b["index"])]
    seen = before + rest_indices
    assert len(seen) == len(set(seen))


def test_a_balanced_pack_with_a_window_resumes_elastically_on_workers_as_locally(cluster,
                                                                              py_sample):
    """batch.balance with a packing window (rows dealt) over Ray: the states of a world of
    2 taken mid-epoch on workers are the local loaders'; merged, the rest of the epoch
    resumes on 3 ranks (the workers plan the rest's rows and deal them over 3) and on 1 as
    the local loaders resume it, field by field, and every sample of the epoch comes once
    over the two parts (the rest is 9 batches of 4: 3 for each of 3 ranks)."""
    spec = balanced_pipeline(py_sample, **ROWS_DEALT)

    def on_ray(world, each):
        """each(loader) of a pool's `world` ranks, opened in turn; the pool closed."""
        opened, out = [], []
        try:
            for rank in range(world):
                opened.append(hray.Loader(spec, rank=rank, world_size=world, workers=2,
                                          worker_resources=WORKER))
                out.append(each(opened[-1]))
        finally:
            for loader in opened:
                loader.close()
        return out

    def locally(world, each):
        out = []
        for rank in range(world):
            with headrace.Loader(spec, rank=rank, world_size=world) as loader:
                out.append(each(loader))
        return out

    def two_steps(loader):
        it = iter(loader)
        taken = [int(i) for _ in range(2) for i in np.asarray(next(it)["index"])]
        return taken, loader.state_dict()

    taken = on_ray(2, two_steps)
    assert taken == locally(2, two_steps)
    assert taken[0][1]["pack"]["waiting"], "the shared window holds samples at step 2"
    before = taken[0][0] + taken[1][0]
    merged = headrace.merge_state_dicts([state for _, state in taken])

    def rest(loader):
        loader.load_state_dict(merged)
        return [fields(b) for b in loader]

    for world in (3, 1):
        got = on_ray(world, rest)
        assert got == locally(world, rest), f"world {world}"
        assert all(got), f"world {world}: every rank has batches left"
        seen = before + [int(i) for part in got for b in part
                         for i in np.frombuffer(b["index"], dtype=np.int64)]
        assert sorted(seen) == list(range(48)), f"world {world}: each sample once"


def test_a_blend_from_workers_is_the_local_loaders_and_resumes_with_new_weights(cluster,
                                                                              py_sample):
    """source.mix over Ray: a rank's batches (and each sample's `source`) are the local
    loader's; a global state resumed with other weights continues every entry where it
    was, on the workers as locally."""
    manifest = str(py_sample / "manifest.jsonl")

    def blend(weights):
        return headrace.Pipeline(
            source={"mix": [{"name": "a", "manifest": manifest, "weight": weights[0]},
                            {"name": "b", "manifest": manifest, "weight": weights[1]}],
                    "until": "all_exhausted"},
            ops=[headrace.ops.tokenize(py_sample / "tokenizer.model", max_length=48)],
            batch_size=8, seed=1, cpu_threads=2, memory_budget="64MiB", epochs=2)

    first, second = blend((0.7, 0.3)), blend((0.2, 0.8))
    states = []
    for rank in (0, 1):
        loader = headrace.Loader(first, rank=rank, world_size=2)
        it = iter(loader)
        for _ in range(2):
            next(it)
        states.append(loader.state_dict())
        loader.close()
    merged = headrace.merge_state_dicts(states)

    def resumed(make):
        loader = make()
        loader.load_state_dict(merged)
        return [digest(b) for b in loader]

    want = local_run(first, rank=1, world_size=2)
    want_rest = [resumed(lambda r=r: headrace.Loader(second, rank=r, world_size=2))
                 for r in (0, 1)]
    opened = []

    def on_ray(pipe, rank):
        opened.append(hray.Loader(pipe, rank=rank, world_size=2, workers=2,
                                  worker_resources=WORKER))
        return opened[-1]

    try:
        loader = on_ray(first, 1)
        sources = set()
        got = []
        counts = collections.Counter()
        for _ in range(2):
            for batch in loader:
                got.append(digest(batch))
                sources.update(batch["source"])
                counts.update(batch["source"])
        # The rank's per-source counts, under the local loader's keys and as it counts
        # them (the run's two epochs).
        stats = loader.stats()
        local = headrace.Loader(first, rank=1, world_size=2)
        for _ in range(2):
            for _batch in local:
                pass
        local_stats = local.stats()
        local.close()
        for name in ("a", "b"):
            assert stats[f"source.{name}.samples"] == counts[name] > 0, stats
            assert stats[f"source.{name}.errors"] == 0
            assert local_stats[f"source.{name}.samples"] == counts[name], local_stats
        loader.close()
        got_rest = [resumed(lambda r=r: on_ray(second, r)) for r in (0, 1)]
    finally:
        for loader in opened:
            loader.close()
    assert got == want and sources == {"a", "b"}
    assert got_rest == want_rest and all(got_rest)


def blend_of(entries, **kw):
    """A blend of `entries` ({name: source keys}, equal weights, all_exhausted) through the
    small pipeline's ops (the first manifest entry's tokenizer), one epoch, unshuffled."""
    ops = headrace.ops
    tokenizer = next(Path(s["manifest"]).parent for s in entries.values() if "manifest" in s)
    return headrace.Pipeline(
        source={"mix": [{"name": name, "weight": 1, **keys} for name, keys in entries.items()],
                "until": "all_exhausted"},
        ops=[ops.decode(), ops.resize(shorter_side=64), ops.center_crop(56), ops.normalize(),
             ops.tokenize(tokenizer / "tokenizer.model", max_length=48)],
        batch_size=8, seed=1, cpu_threads=2, memory_budget="64MiB", epochs=1, **kw)


def test_a_blend_entrys_own_max_error_rate_stops_the_run_as_locally(cluster, py_sample,
                                                                    tmp_path):
    """source.mix[i].max_error_rate (README: an entry's own rate stops the run when its
    samples fail more often) applies on Ray too: the run stops where, and with the error,
    the local loader's does (issue B1: a Ray rank applied only the run's rate)."""
    import shutil

    data = tmp_path / "b"
    shutil.copytree(py_sample, data)
    for i in range(0, 48, 5):  # 10 of b's 48 images corrupt: 21%, above b's own 10%
        (data / "images" / f"{i:06d}.jpg").write_bytes(b"not a jpeg")
    blend = blend_of({"a": {"manifest": str(py_sample / "manifest.jsonl")},
                      "b": {"manifest": str(data / "manifest.jsonl"), "max_error_rate": 0.1}},
                     overrides={"errors.max_error_rate": 1.0, "errors.min_samples": 8})
    with pytest.raises(headrace.Error, match=r"source\.mix\[1\] \(b\): too many bad") as local:
        for _ in headrace.Loader(blend):
            pass
    loader = hray.Loader(blend, workers=2, worker_resources=WORKER)
    try:
        with pytest.raises(headrace.Error) as got:
            for _ in loader:
                pass
    finally:
        loader.close()
    assert type(got.value) is type(local.value)
    assert str(got.value) == str(local.value)


def test_a_bad_shard_of_a_blend_entry_counts_as_the_local_loader_counts_it(cluster, py_sample,
                                                                         tmp_path):
    """A shard of entry b skipped at open is one shard_error of the run and no entry's
    failed sample, on Ray as locally (issue B2: a Ray rank counted it against the entry of
    the sample whose index is the shard's place in b's list, entry a)."""
    subprocess.run([BIN, "make-sample", "--out", str(tmp_path / "b"), "--samples", "24",
                    "--seed", "2", "--size", "96x72", "--shards", "--shard-size", "60000"],
                   check=True, capture_output=True)
    shards = sorted((tmp_path / "b" / "shards").glob("shard-*.tar"))
    assert len(shards) >= 2, shards
    index = shards[1].with_name(shards[1].name + ".idx.json")
    index.write_bytes(index.read_bytes()[:len(index.read_bytes()) // 2])  # not JSON
    blend = blend_of(
        {"a": {"manifest": str(py_sample / "manifest.jsonl")},
         "b": {"shards": f"{tmp_path}/b/shards/shard-{{000000..{len(shards) - 1:06d}}}.tar"}},
        overrides={"errors.max_error_rate": 0.5})
    with headrace.Loader(blend) as local_loader:
        for _ in local_loader:
            pass
        want = local_loader.stats()
    loader = hray.Loader(blend, workers=2, worker_resources=WORKER)
    try:
        for _ in loader:
            pass
        stats = loader.stats()
    finally:
        loader.close()
    assert want["samples_failed"] == 1 and want["errors.shard_error"] == 1, want
    for name in ("a", "b"):
        assert stats[f"source.{name}.samples"] == want[f"source.{name}.samples"] > 0, (name, stats)
        assert stats[f"source.{name}.errors"] == want[f"source.{name}.errors"], (name, stats)
    assert stats["samples_failed"] == want["samples_failed"]


def test_more_ranks_than_an_epochs_batches_is_the_local_loaders_config_error(cluster, pipeline):
    """A rank's share of an epoch is the engine's rule (exec/epoch_order.h RankShareOf), its
    error too: 7 ranks of an epoch of 6 batches fail as the local loader's do."""
    with pytest.raises(headrace.ConfigError) as local:
        list(headrace.Loader(pipeline, rank=0, world_size=7))
    loader = hray.Loader(pipeline, rank=0, world_size=7, workers=1, worker_resources=WORKER)
    try:
        with pytest.raises(headrace.ConfigError) as got:
            list(loader)
    finally:
        loader.close()
    assert "fewer than world_size 7" in str(local.value)
    assert str(got.value) == str(local.value)


def test_a_worker_killed_mid_epoch_loses_and_duplicates_nothing(cluster, pipeline):
    loader = hray.Loader(pipeline, workers=2, worker_resources=WORKER, prefetch=4)
    try:
        it = iter(loader)
        got = [digest(next(it)) for _ in range(2)]
        victim = live_workers(loader)[0]["worker"]
        handles = ray.get(loader._coordinator.worker_handles.remote())
        ray.kill(handles[victim])
        got += rest_of_epoch(it, digest)
        got += [digest(b) for b in loader]  # epoch 1
        stats = loader.stats()
    finally:
        loader.close()
    assert got == local_run(pipeline)
    assert stats["worker_deaths"] == 1 and stats["reassignments"] >= 1
    assert victim not in {w["worker"] for w in stats["workers"]}
    assert len(stats["workers"]) == 2  # a replacement keeps the pool at its size


def crash_on_sample(poison):
    """A batch op that kills its worker process when the batch holds dataset index
    ``poison``: a sample that crashes the engine (a segfault in a decoder, say)."""
    def fn(batch):
        if poison in batch["index"]:
            os._exit(70)
    return fn


def test_a_batch_that_kills_every_worker_fails_the_rank_naming_it(cluster, pipeline):
    # Pickled by value to the workers: this module is not importable there.
    from ray import cloudpickle
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    loader = hray.Loader(pipeline.map_batch(crash_on_sample(poison=0)), workers=2,
                         worker_resources=WORKER, prefetch=2)
    try:
        with pytest.raises(RuntimeError) as failed:
            for _ in loader:
                pass
        stats = loader.stats()
    finally:
        loader.close()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    message = str(failed.value)
    assert f"{hray.loader.MAX_WORKER_DEATHS_PER_BATCH} workers in a row died" in message
    assert "epoch 0, batch" in message and "rank 0" in message
    assert stats["worker_deaths"] >= hray.loader.MAX_WORKER_DEATHS_PER_BATCH


def test_scale_up_and_down_mid_epoch_keeps_the_sequence(cluster, pipeline):
    loader = hray.Loader(pipeline, workers=1, worker_resources=WORKER)
    try:
        it = iter(loader)
        got = [digest(next(it)) for _ in range(2)]
        loader.scale(3)
        wait_for(lambda: len(live_workers(loader)) == 3, "three live workers")
        got += [digest(next(it)) for _ in range(2)]
        loader.scale(1)
        got += rest_of_epoch(it, digest)
        got += [digest(b) for b in loader]
        wait_for(lambda: len(loader.pool_stats()["workers"]) == 1, "the pool back at one")
        used = {int(w) for w in loader.stats()["batches_by_worker"]}
    finally:
        loader.close()
    assert got == local_run(pipeline)
    assert len(used) >= 2  # the added workers computed some of the batches


def test_autoscale_grows_the_pool_while_the_rank_waits(cluster, pipeline):
    # Any wait is above a target of 0: rank 0 adds a worker at its 8th batch, up to 2.
    loader = hray.Loader(pipeline, workers=1, min_workers=1, max_workers=2,
                         target_wait_time_ratio=0.0, worker_resources=WORKER)
    try:
        got = [digest(b) for _ in range(2) for b in loader]
        targets = loader.pool_stats()["target_workers"]
        with pytest.raises(headrace.ConfigError, match=r"outside \[min_workers, max_workers\]"):
            loader.scale(3)
    finally:
        loader.close()
    assert targets == 2
    assert got == local_run(pipeline)


def test_a_killed_coordinator_restarts_and_the_sequence_goes_on(cluster, pipeline, tmp_path):
    journal = tmp_path / "journal.jsonl"
    loader = hray.Loader(pipeline, workers=2, worker_resources=WORKER, journal=str(journal))
    try:
        it = iter(loader)
        got = [digest(next(it)) for _ in range(3)]
        before = ray.get(loader._coordinator.pid.remote())
        ray.kill(loader._coordinator, no_restart=False)
        got += rest_of_epoch(it, digest)
        assert ray.get(loader._coordinator.pid.remote()) != before  # a new process
        got += [digest(b) for b in loader]
        pool = loader.pool_stats()  # as the run ended
    finally:
        loader.close()
    assert got == local_run(pipeline)
    assert pool["coordinator_restarts"] == 1
    assert pool["consumed"]["0"] == [2, 0]  # journaled: the run's end, after the restart
    assert pool["samples"]["0"] == [96, 0]  # the run's error budget count: 2 epochs of 48
    assert journal.read_text().count('"e":"start"') == 2


# A trainer process: starts a pool, takes two batches of its first epoch, says so, and
# waits (on its stdin) to be killed mid-epoch.
DRIVER = """
import pickle, sys
import headrace.ray as hray
address, pipeline, name, lease_s = sys.argv[1:]
with open(pipeline, "rb") as f:
    pipeline = pickle.load(f)
loader = hray.Loader(pipeline, workers=2, worker_resources={"CPU": 1, "headrace_cpu": 1},
                     name=name, address=address, lease_s=float(lease_s))
it = iter(loader)
next(it), next(it)
print("mid-epoch", flush=True)
sys.stdin.read()
"""


def pool_alive(name):
    try:
        ray.get_actor(f"headrace-{name}", namespace="headrace")
        return True
    except ValueError:
        return False


def test_a_sigkilled_trainer_leaves_no_pool_behind_after_the_lease(cluster, pipeline, tmp_path):
    import pickle
    import uuid

    lease_s = 3.0
    name = f"killed-{uuid.uuid4().hex[:8]}"
    (tmp_path / "pipeline.pkl").write_bytes(pickle.dumps(pipeline))
    (tmp_path / "driver.py").write_text(DRIVER)
    total = ray.cluster_resources()
    driver = subprocess.Popen(
        [sys.executable, str(tmp_path / "driver.py"), cluster.address,
         str(tmp_path / "pipeline.pkl"), name, str(lease_s)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert driver.stdout.readline().strip() == "mid-epoch"
        # The pool holds two workers' CPUs and headrace_cpu while the trainer lives.
        wait_for(lambda: ray.available_resources().get("headrace_cpu", 0) ==
                 total["headrace_cpu"] - 2, "the workers' headrace_cpu taken")
        coordinator = ray.get_actor(f"headrace-{name}", namespace="headrace")
        workers = list(ray.get(coordinator.worker_handles.remote()).values())
        assert len(workers) == 2
    finally:
        driver.kill()
        driver.wait()
    killed = time.monotonic()

    def released():
        free = ray.available_resources()
        return (not pool_alive(name) and free.get("headrace_cpu", 0) == total["headrace_cpu"]
                and free.get("CPU", 0) == total["CPU"])

    # The lease, plus Ray's time to end the actors and report their resources free.
    wait_for(released, "the pool gone and its resources back", timeout=lease_s + 30)
    ended_s = time.monotonic() - killed
    for worker in workers:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(worker.stats.remote(), timeout=30)
    print(f"pool ended {ended_s:.1f} s after the trainer's SIGKILL (lease_s {lease_s})")
    assert ended_s >= lease_s - 1  # ended by the lease, not by the kill itself


def test_a_rank_idle_past_the_lease_and_a_coordinator_restart_keep_the_pool(cluster,
                                                                              pipeline):
    lease_s = 2.0
    loader = hray.Loader(pipeline, workers=1, worker_resources=WORKER, lease_s=lease_s)
    try:
        it = iter(loader)
        got = [digest(next(it)) for _ in range(2)]
        before = ray.get(loader._coordinator.pid.remote())

        def up_s():
            # Reading the stats renews nothing: only a rank's calls do.
            return loader.pool_stats()["lease"]["up_s"]

        # No iteration for longer than the lease: the heartbeats keep the pool.
        wait_for(lambda: up_s() > 1.5 * lease_s, "more than the lease gone by")
        assert ray.get(loader._coordinator.pid.remote()) == before
        ray.kill(loader._coordinator, no_restart=False)
        got += [digest(next(it))]
        # The new incarnation gives the ranks a lease of its own, renewed the same way.
        wait_for(lambda: up_s() > 1.5 * lease_s, "more than the lease since the restart")
        got += rest_of_epoch(it, digest)
        got += [digest(b) for b in loader]
        pool = loader.pool_stats()
    finally:
        loader.close()
    assert got == local_run(pipeline)
    assert pool["coordinator_restarts"] == 1 and pool["lease"]["heartbeats"] >= 2


def test_a_state_taken_with_two_workers_resumes_with_one_identically(cluster, pipeline):
    full = local_run(pipeline)
    loader = hray.Loader(pipeline, workers=2, worker_resources=WORKER)
    try:
        it = iter(loader)
        got = [digest(next(it)) for _ in range(4)]
        state = loader.state_dict()
    finally:
        loader.close()
    assert got == full[:4] and state["epoch"] == 0 and state["batch_in_epoch"] == 4
    resumed = hray.Loader(pipeline, workers=1, worker_resources=WORKER, state_dict=state)
    try:
        rest = [digest(b) for _ in range(2) for b in resumed]
    finally:
        resumed.close()
    assert rest == full[4:]
    # The same state resumes the local loader too: one state format for both.
    local = headrace.Loader(pipeline, state_dict=state)
    assert [digest(b) for _ in range(2) for b in local] == full[4:]


def _broken_pipeline(py_sample, tmp_path, pad=True, pack=None):
    """The sample with one corrupt image (5) and one missing (17), decoded and tokenized;
    half the samples may fail."""
    import shutil

    data = tmp_path / "data"
    shutil.copytree(py_sample, data)
    (data / "images" / "000005.jpg").write_bytes(b"not a jpeg")  # corrupt
    (data / "images" / "000017.jpg").unlink()                     # missing
    ops = headrace.ops
    return headrace.Pipeline(
        source=data / "manifest.jsonl", batch_size=8, seed=1, epochs=1, shuffle=False,
        ops=[ops.decode(), ops.resize(shorter_side=64), ops.center_crop(56), ops.normalize(),
             ops.tokenize(data / "tokenizer.model", max_length=48, pad=pad)],
        pack=pack, overrides={"errors.max_error_rate": 0.5})


def _local_and_ray(pipeline):
    """Each batch's (index, errors, sample indices) from headrace.Loader and from
    headrace.ray.Loader, and the Ray loader's stats."""
    local = [(b.index, b.errors, np.asarray(b["index"]).tolist())
             for b in headrace.Loader(pipeline)]
    loader = hray.Loader(pipeline, workers=2, worker_resources=WORKER)
    try:
        got = [(b.index, b.errors, np.asarray(b["index"]).tolist()) for b in loader]
        stats = loader.stats()
    finally:
        loader.close()
    return local, got, stats


def test_a_workers_sample_errors_reach_the_ranks_report_as_locally(cluster, py_sample,
                                                                  tmp_path):
    """With batch.pack the rank's former carries a worker's sample errors (each sent whole
    in the batch's tally) into the packed batches: the same text, in the same batches, as
    the local loader's."""
    local, got, stats = _local_and_ray(_broken_pipeline(py_sample, tmp_path))
    assert got == local
    assert stats["samples_failed"] == 2 and stats["samples"] == 46
    assert [len(e) for _, e, _ in got] == [1, 0, 1, 0, 0, 0]


def test_a_workers_sample_errors_reach_the_ranks_packed_batches_as_locally(cluster, py_sample,
                                                                           tmp_path):
    """With batch.pack the rank's former carries a worker's sample errors (each sent whole
    in the batch's tally) into the packed batches: the same text, in the same batches, as
    the local loader's."""
    local, got, stats = _local_and_ray(_broken_pipeline(
        py_sample, tmp_path, pad=False, pack={"seq_len": 64, "window": 6}))
    assert got == local
    assert sum(len(e) for _, e, _ in got) == 2 and stats["samples_failed"] == 2


def test_the_error_budget_is_the_runs_not_each_ranks(cluster, py_sample, tmp_path):
    """Rank 1's first batch holds 4 corrupt images (50%), the run 4 of 48 (8%); the limit
    is 20%. Locally, rank 1 alone would stop. On Ray the budget is the run's: rank 1 goes
    on when rank 0's clean samples are in the count, and a clean rank stops when the run's
    count is over the limit."""
    import shutil
    import uuid

    data = tmp_path / "data"
    shutil.copytree(py_sample, data)
    for i in (8, 9, 10, 11):  # unshuffled, batch 8, 2 ranks: rank 1's first batch
        (data / "images" / f"{i:06d}.jpg").write_bytes(b"not a jpeg")
    ops = headrace.ops
    broken = headrace.Pipeline(
        source=data / "manifest.jsonl", batch_size=8, seed=1, epochs=1, shuffle=False,
        ops=[ops.decode(), ops.resize(shorter_side=64), ops.center_crop(56), ops.normalize(),
             ops.tokenize(data / "tokenizer.model", max_length=48)],
        overrides={"errors.max_error_rate": 0.2, "errors.min_samples": 1})
    with pytest.raises(headrace.Error, match="too many bad samples"):
        list(headrace.Loader(broken, rank=1, world_size=2))

    def pair():
        name = f"budget-{uuid.uuid4().hex[:8]}"
        return [hray.Loader(broken, rank=r, world_size=2, workers=1, worker_resources=WORKER,
                            name=name) for r in (0, 1)]

    def consumed(loader, rank):
        # The coordinator itself: a loader whose run ended keeps its last figures only.
        coordinator = ray.get_actor(f"headrace-{loader.name}", namespace="headrace")
        return ray.get(coordinator.stats.remote())["samples"].get(str(rank))

    # Rank 0's clean epoch first: rank 1's bad batch is 4 of 32 of the run, then 4 of 48.
    first, second = pair()
    try:
        assert sum(len(b["index"]) for b in first) == 24
        wait_for(lambda: consumed(first, 0) == [24, 0], "rank 0's count at the coordinator")
        it = iter(second)
        got = [(b.index, len(b.errors)) for b in (next(it) for _ in range(3))]
        assert got == [(1, 4), (3, 0), (5, 0)]
        # Read before the run's end, when the last rank to finish stops the pool.
        wait_for(lambda: consumed(first, 1) == [20, 4], "rank 1's count at the coordinator")
        assert rest_of_epoch(it, digest) == []
    finally:
        second.close()
        first.close()

    # Rank 1 first: it stops at its bad batch; then rank 0, which has no bad sample, stops
    # too, at its first batch: the run's count is 4 of 16.
    first, second = pair()
    try:
        with pytest.raises(headrace.Error, match=r"4 of 8 samples of the run failed.*rank 1"):
            list(second)
        wait_for(lambda: consumed(first, 1) == [4, 4], "rank 1's count at the coordinator")
        with pytest.raises(headrace.Error,
                           match=r"4 of 16 samples of the run failed.*rank 0: 0 of 8"):
            list(first)
    finally:
        second.close()
        first.close()


def test_a_worker_keeps_the_manifest_as_lines_and_says_what_it_holds(cluster, make_pipeline,
                                                                     py_sample):
    lines = make_pipeline(epochs=1, overrides={"source.records": "lines"})
    loader = hray.Loader(lines, workers=1, worker_resources=WORKER)
    try:
        it = iter(loader)
        got = [digest(next(it))]
        handles = ray.get(loader._coordinator.worker_handles.remote())
        info = ray.get(next(iter(handles.values())).info.remote())
        got += rest_of_epoch(it, digest)
    finally:
        loader.close()
    assert got == local_run(make_pipeline(epochs=1), epochs=1)  # parsed locally: same batches
    n = info["num_samples"]
    assert n == 48
    assert info["manifest_mapped_bytes"] == (py_sample / "manifest.jsonl").stat().st_size
    assert info["manifest_bytes"] < 4 * n + 1024  # offsets, not records
    assert info["order_bytes"] == 4 * n


def test_the_default_window_is_capped_to_a_quarter_of_the_ranks_object_store(cluster,
                                                                             py_sample):
    # 8 x 3 x 224 x 224 f32 = 4.8 MB a batch; the rank's node has ~96 MiB of object store:
    # a quarter holds 4 or 5 batches, under the default window of 4 workers (8).
    ops = headrace.ops
    big = headrace.Pipeline(
        source=py_sample / "manifest.jsonl", batch_size=8, seed=1, epochs=1,
        ops=[ops.decode(), ops.resize(shorter_side=256), ops.center_crop(224), ops.normalize()])
    loader = hray.Loader(big, workers=4, worker_resources=WORKER)
    try:
        wait_for(lambda: len(live_workers(loader)) == 4, "four live workers")
        it = iter(loader)
        first = next(it)
        assert first["image"].shape == (8, 3, 224, 224)
        batch_bytes = sum(np.asarray(v).nbytes for v in first.values() if not isinstance(v, list))
        window = loader.stats()["window"]
        held = [len(loader._impl._pending)]
        for _ in range(3):
            next(it)
            held.append(len(loader._impl._pending))
        rest_of_epoch(it, digest)
    finally:
        loader.close()
    here = ray.get_runtime_context().get_node_id()
    store = next(int(n["Resources"]["object_store_memory"]) for n in ray.nodes()
                 if n["NodeID"] == here)
    assert 2 <= store // 4 // batch_bytes < 8  # the cap is below the default
    assert window == store // 4 // batch_bytes
    assert max(held) <= window


def test_a_real_pytorch_loop_trains_on_ray_batches(cluster, pipeline):
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 56 * 56, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = hray.TorchLoader(pipeline, workers=2, worker_resources=WORKER)
    losses, indices = [], []
    try:
        for _ in range(2):
            for batch in loader:
                assert isinstance(batch["image"], torch.Tensor)
                target = batch["input_ids"][:, 0] % 4
                loss = torch.nn.functional.cross_entropy(model(batch["image"]), target)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
                indices.append(batch["index"].tolist())
        stats = loader.stats()
    finally:
        loader.close()
    local = headrace.Loader(pipeline)
    assert indices == [np.asarray(b["index"]).tolist() for _ in range(2) for b in local]
    assert len(losses) == 12 and all(np.isfinite(losses))
    assert "wait_time_ratio" in stats and stats["workers"]


def test_bad_input_fails_clearly_before_any_work(cluster, pipeline):
    with pytest.raises(headrace.ConfigError, match="workers must be an int >= 1"):
        hray.Loader(pipeline, workers=0)
    with pytest.raises(headrace.ConfigError, match="placement must be one of spread, pack"):
        hray.Loader(pipeline, placement="everywhere")
    with pytest.raises(headrace.ConfigError, match="no node of the Ray cluster has gpu_box=1"):
        hray.Loader(pipeline, worker_resources={"CPU": 1, "gpu_box": 1})
    with pytest.raises(headrace.ConfigError, match="no node of the Ray cluster has CPU=64"):
        hray.Loader(pipeline, worker_resources={"CPU": 64})
    with pytest.raises(headrace.ConfigError, match="min_workers <= workers <= max_workers"):
        hray.Loader(pipeline, workers=4, max_workers=2)
    for lease_s in (0, float("nan"), "60", 1e9):
        with pytest.raises(headrace.ConfigError, match=r"lease_s must be .* in \[1, 86400\]"):
            hray.Loader(pipeline, lease_s=lease_s)
    # Nothing was started by any of them.
    assert not [a for a in ray.util.list_named_actors(all_namespaces=True)
                if a["name"].startswith("headrace-")]


def test_no_ray_cluster_reachable_is_a_clear_error(make_pipeline, tmp_path):
    # A fresh process, pointed at an address where no cluster runs.
    code = ("import headrace, headrace.ray, sys\n"
            f"p = headrace.Pipeline(source={str(make_pipeline().spec().manifest)!r})\n"
            "try:\n"
            "    headrace.ray.Loader(p, address='127.0.0.1:1')\n"
            "except headrace.ConfigError as e:\n"
            "    print(e); sys.exit(3)\n")
    env = dict(os.environ, RAY_ADDRESS="", RAY_gcs_rpc_server_connect_timeout_s="1")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "no Ray cluster reachable at 127.0.0.1:1" in proc.stdout


def test_inside_a_torch_trainer_each_rank_gets_its_share(cluster, pipeline, tmp_path):
    import json

    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    # Nested, so that it travels by value (the Train workers cannot import this module).
    def _train_loop(config):
        """One Ray Train worker: a DDP step per batch of its rank's headrace.ray batches."""
        import json

        import torch
        import ray.train
        import ray.train.torch

        import headrace.ray

        loader = headrace.ray.TorchLoader(config["pipeline"], workers=2,
                                          worker_resources=config["worker"],
                                          name="train-test")
        rank = loader.loader.rank
        model = ray.train.torch.prepare_model(torch.nn.Sequential(
            torch.nn.Flatten(), torch.nn.Linear(3 * 56 * 56, 4)))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        seen = []
        for _ in range(2):
            for batch in loader:
                loss = torch.nn.functional.cross_entropy(model(batch["image"]),
                                                         batch["input_ids"][:, 0] % 4)
                opt.zero_grad()
                loss.backward()
                opt.step()
                seen.append(batch["index"].tolist())
        with open(f"{config['out']}/rank{rank}.json", "w") as f:
            json.dump({"rank": rank, "world_size": loader.loader.world_size, "seen": seen}, f)
        loader.close()

    trainer = TorchTrainer(
        _train_loop,
        train_loop_config={"pipeline": pipeline, "out": str(tmp_path), "worker": WORKER},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False,
                                     resources_per_worker={"CPU": 0.5, "trainer": 1}),
        run_config=RunConfig(storage_path=str(tmp_path / "train"), name="headrace"))
    trainer.fit()
    for rank in (0, 1):
        got = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert got["world_size"] == 2  # from the Ray Train context, not given
        local = headrace.Loader(pipeline, rank=rank, world_size=2)
        assert got["seen"] == [np.asarray(b["index"]).tolist() for _ in range(2) for b in local]


def test_every_rank_and_worker_exports_its_own_metrics(cluster, pipeline):
    from test_metrics import scrape, value  # noqa: E402  (the same parser as the local tests)
    loader = hray.Loader(pipeline, rank=1, world_size=2, workers=2, worker_resources=WORKER,
                         metrics_port=0, metrics_labels={"job": "ray-test"})
    try:
        it = iter(loader)
        for _ in range(2):
            next(it)
        endpoints = loader.metrics_endpoints()
        rank = scrape(endpoints["rank"])
        assert value(rank, "headrace_samples_total", role="trainer", rank=1, job="ray-test") == 16
        assert value(rank, "headrace_batches_total", rank=1) == 2
        assert value(rank, "headrace_wait_time_ratio", rank=1) is not None
        node = ray.util.get_node_ip_address()
        assert value(rank, "headrace_samples_total", node=node) == 16
        wait_for(lambda: all(loader.metrics_endpoints()["workers"].values()) and
                 len(loader.metrics_endpoints()["workers"]) == 2, "both workers' endpoints")
        computed = 0
        for wid, url in loader.metrics_endpoints()["workers"].items():
            # A sample is in the op's count when its decode ends and in the stage's when
            # its chain does: they agree once the worker has finished what it was given
            # (the rank's window is bounded, so it does).
            seen = {}

            def agree():
                text = scrape(url)
                seen["items"] = value(text, "headrace_stage_items_total", role="worker",
                                      worker=wid, stage="cpu")
                decoded = value(text, "headrace_op_latency_seconds_count", worker=wid,
                                op="image.decode")
                return seen["items"] is not None and decoded == seen["items"]
            wait_for(agree, f"worker {wid}'s stage and op counts to agree")
            computed += seen["items"]
        # The workers computed at least the 2 batches rank 1 consumed (and its prefetch).
        assert computed >= 16
    finally:
        loader.close()
        loader.close_metrics()


def test_the_ray_torch_loader_overlaps_device_copies_like_the_local_one(cluster, pipeline):
    from test_gpu_handoff import GatedCopier  # noqa: E402  (the CPU stand-in for CUDA)
    copier = GatedCopier(complete_at_once=True)
    loader = hray.TorchLoader(pipeline, workers=2, worker_resources=WORKER, prefetch=4,
                              device_prefetch=3, copier=copier)
    try:
        assert loader.prefetch == 3 and loader.loader._prefetch == 4
        got = [b["index"].tolist() for b in loader]
    finally:
        loader.close()
    local = headrace.Loader(pipeline)
    assert got == [np.asarray(b["index"]).tolist() for b in local]
    assert copier.handed == 6 and len(copier.host_ptrs) == 6
