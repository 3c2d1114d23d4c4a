"""`make bench-ray`: headrace.ray on simulated nodes (ray.cluster_utils.Cluster on one machine).

Rungs, each one epoch of the example pipeline (examples/vqa.yaml, 1000 samples, batch 32)
with a trainer that never waits (steady samples/s from the first batch on):
  embedded     headrace.Loader in this process, 1 CPU thread: the reference per core
  workers=N    headrace.Loader's batches from N worker actors (1 engine thread each),
               spread over two CPU nodes, by reference (the rank owns each batch)
  by-value     the same with 2 workers, each batch fetched through one relay actor that
               ray.get()s it and returns it (the "through the coordinator" rung)
  pack         2 workers packed on one CPU node (vs spread)
Also: the copies of a batch between worker and rank (the arrays the rank gets are
read-only views of the object store: no copy on the rank's node) and each worker's memory
for the dataset (manifest + one epoch's order).
"""
import argparse
import json
import os
import platform
import time

import numpy as np
import ray
from ray.cluster_utils import Cluster

import headrace
import headrace.ray as hray

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = {"CPU": 1, "headrace_cpu": 1}


def pipeline(config):
    return headrace.Pipeline.from_yaml(
        config, overrides={"execution.cpu_threads": 1, "epochs": 1})


def steady(loader_iter):
    """samples/s from the first batch to the last, the first batch's wait, batches."""
    first = None
    samples = batches = 0
    start = time.perf_counter()
    views = None
    for batch in loader_iter:
        now = time.perf_counter()
        if first is None:
            first, ttfb = now, now - start
            arr = batch["image"]
            views = {"writeable": bool(np.asarray(arr).flags.writeable),
                     "owns_data": bool(np.asarray(arr).flags.owndata)}
        else:
            samples += len(batch["index"])
        batches += 1
    elapsed = time.perf_counter() - first
    return {"samples_per_s": samples / elapsed, "time_to_first_batch_s": ttfb,
            "batches": batches, "rank_view": views}


@ray.remote(num_cpus=0, resources={"trainer": 0.01})
class Relay:
    """The by-value rung: a batch passes through this actor (as through a coordinator
    that returned data) before the rank gets it."""

    def fetch(self, worker, k):
        return ray.get(worker.get_batch.remote(k))


def by_value(config, workers):
    """Batches of a Loader's pool fetched through one Relay instead of by reference."""
    loader = hray.Loader(pipeline(config), workers=workers, worker_resources=WORKER)
    try:
        relay = Relay.remote()
        info = loader._run_info
        total = info["batches_per_epoch"]
        coord = loader._coordinator
        ray.get(relay.fetch.remote(ray.get(coord.assign.remote(0, [0]))[0][0][1], 0))  # warm
        start = time.perf_counter()
        pending, samples, k = [], 0, 1
        ahead = max(4, 2 * workers)
        while k < total or pending:
            while k < total and len(pending) < ahead:
                (wid, handle), = ray.get(coord.assign.remote(0, [k]))[0]
                pending.append(relay.fetch.remote(handle, k))
                k += 1
            out = ray.get(pending.pop(0))
            samples += len(out["fields"]["index"])
        return {"samples_per_s": samples / (time.perf_counter() - start),
                "batches": total - 1}
    finally:
        loader.close()


def ray_rung(config, workers, placement):
    loader = hray.Loader(pipeline(config), workers=workers, placement=placement,
                         worker_resources=WORKER)
    try:
        # Wait until the pool is up: startup is not the steady state measured here.
        deadline = time.monotonic() + 120
        while sum(w["state"] == "live" for w in loader.pool_stats()["workers"]) < workers:
            if time.monotonic() > deadline:
                raise RuntimeError("workers did not start")
            time.sleep(0.1)
        out = steady(loader)
        stats = loader.stats()
        out.update(wait_time_ratio=stats["wait_time_ratio"],
                   nodes=len({w["node_id"] for w in stats["workers"]}),
                   bytes_per_batch=stats["bytes_moved"] / max(1, out["batches"]),
                   manifest_bytes=loader._run_info["manifest_bytes"],
                   order_bytes=loader._run_info["order_bytes"])
        return out
    finally:
        loader.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="examples/vqa.yaml")
    ap.add_argument("--json", default="bench/ray.json")
    args = ap.parse_args()
    os.chdir(REPO)
    results = {"machine": f"{platform.node()} {os.cpu_count()} CPUs",
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rungs": {}}
    rungs = results["rungs"]
    # The embedded reference is measured before and after the cluster runs, and the mean
    # taken: on a shared 2-core machine the load drifts between rungs.
    before = steady(headrace.Loader(pipeline(args.config)))
    print("embedded (before)", before, flush=True)
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "resources": {"trainer": 1}, "include_dashboard": False,
        "object_store_memory": 256 << 20})
    for _ in range(2):
        cluster.add_node(num_cpus=2, resources={"headrace_cpu": 2},
                         object_store_memory=256 << 20)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        for n in (1, 2, 4):
            rungs[f"workers={n}"] = ray_rung(args.config, n, "spread")
            print(f"workers={n}", rungs[f"workers={n}"], flush=True)
        rungs["pack, workers=2"] = ray_rung(args.config, 2, "pack")
        print("pack", rungs["pack, workers=2"], flush=True)
        rungs["by-value, workers=2"] = by_value(args.config, 2)
        print("by-value", rungs["by-value, workers=2"], flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()
    after = steady(headrace.Loader(pipeline(args.config)))
    print("embedded (after)", after, flush=True)
    rungs["embedded"] = dict(after, samples_per_s=(before["samples_per_s"] +
                                                   after["samples_per_s"]) / 2,
                             before_after=[before["samples_per_s"], after["samples_per_s"]])
    rungs = results["rungs"] = {"embedded": rungs.pop("embedded"), **rungs}
    base = rungs["embedded"]["samples_per_s"]
    print(f"\n{'rung':<22}{'samples/s':>10}{'per worker':>12}{'vs embedded/core':>18}"
          f"{'wait ratio':>12}{'nodes':>7}")
    for name, r in rungs.items():
        n = int(name.split("=")[1]) if "workers=" in name else 1
        print(f"{name:<22}{r['samples_per_s']:>10.1f}{r['samples_per_s'] / n:>12.1f}"
              f"{r['samples_per_s'] / n / base:>18.2f}"
              f"{r['wait_time_ratio'] if 'wait_time_ratio' in r else float('nan'):>12.3f}"
              f"{r.get('nodes', 1):>7}")
    r = rungs["workers=2"]
    print(f"\nbatch bytes moved per batch {r['bytes_per_batch']:.0f}; the rank's arrays: "
          f"writeable={r['rank_view']['writeable']}, own their data="
          f"{r['rank_view']['owns_data']} (read-only views of the object store: the one copy "
          f"is the worker's serialization into it); per worker: manifest "
          f"{r['manifest_bytes']} B + one epoch's order {r['order_bytes']} B")
    with open(args.json, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
