"""`make run-ray`: the example pipeline disaggregated on a local multi-node Ray cluster.

Starts ray.cluster_utils.Cluster on this machine: a "trainer" head node and two CPU nodes
that offer a custom `headrace_cpu` resource. A pool of headrace.ray workers (SPREAD over
the CPU nodes) computes examples/vqa.yaml's batches; two trainer ranks, Ray actors on the
trainer node, each pull their own batches by reference and run a simulated step
(trainer.step_ms). Prints each rank's wait-time ratio and each worker's node.
"""
import argparse
import os
import time

import ray
from ray.cluster_utils import Cluster

import headrace
import headrace.ray

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@ray.remote(resources={"trainer": 1}, num_cpus=0)
class Rank:
    def run(self, config, rank, world_size, workers, placement, step_s):
        os.chdir(REPO)  # the config's paths are relative to the repository
        pipeline = headrace.Pipeline.from_yaml(config)
        loader = headrace.ray.Loader(
            pipeline, rank=rank, world_size=world_size, workers=workers, placement=placement,
            worker_resources={"CPU": 1, "headrace_cpu": 1}, name="make-run-ray")
        batches = samples = 0
        for _ in range(pipeline.spec().epochs or 1):
            for batch in loader:
                batches += 1
                samples += len(batch["index"])
                time.sleep(step_s)  # the training step
        stats = loader.stats()
        return {"rank": rank, "batches": batches, "samples": samples,
                "wait_time_ratio": stats["wait_time_ratio"],
                "time_to_first_batch_s": stats["time_to_first_batch_s"],
                "batches_by_worker": stats["batches_by_worker"], "workers": stats["workers"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="examples/vqa.yaml")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--placement", default="spread", choices=("spread", "pack"))
    ap.add_argument("--step-ms", type=float, default=None,
                    help="simulated step per batch (default: the config's trainer.step_ms)")
    args = ap.parse_args()
    step_ms = args.step_ms
    if step_ms is None:
        import yaml  # ray depends on PyYAML
        with open(os.path.join(REPO, args.config)) as f:
            step_ms = (yaml.safe_load(f).get("trainer") or {}).get("step_ms", 0)
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "resources": {"trainer": args.ranks}, "include_dashboard": False,
        "object_store_memory": 256 << 20})
    nodes = {"trainer": cluster.head_node.node_id}
    for i in range(2):
        node = cluster.add_node(num_cpus=1, resources={"headrace_cpu": 2},
                                object_store_memory=256 << 20)
        nodes[f"cpu{i}"] = node.node_id
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    names = {v: k for k, v in nodes.items()}
    try:
        start = time.perf_counter()
        ranks = [Rank.remote() for _ in range(args.ranks)]
        results = ray.get([r.run.remote(args.config, i, args.ranks, args.workers,
                                         args.placement, step_ms / 1000) for i, r in
                           enumerate(ranks)])
        elapsed = time.perf_counter() - start
    finally:
        ray.shutdown()
        cluster.shutdown()
    print(f"run-ray: {args.config} on 3 nodes (trainer, cpu0, cpu1), {args.ranks} ranks, "
          f"{args.workers} workers placed {args.placement}, step {step_ms:g} ms, "
          f"{elapsed:.1f} s in all")
    for r in results:
        print(f"  rank {r['rank']}: {r['batches']} batches, {r['samples']} samples, "
              f"wait-time ratio {r['wait_time_ratio']:.3f}, first batch after "
              f"{r['time_to_first_batch_s']:.1f} s, batches by worker {r['batches_by_worker']}")
    seen = {}
    for r in results:
        for w in r["workers"]:
            seen[w["worker"]] = w
    for wid, w in sorted(seen.items()):
        print(f"  worker {wid}: node {names.get(w['node_id'], w['node_id'])} "
              f"({(w['node_id'] or '?')[:12]}), {w['assigned']} batches assigned")


if __name__ == "__main__":
    main()
