"""The coordinator actor: metadata only.

It owns the worker pool (starts, places, replaces and drains the worker actors), hands
each rank a worker for each batch it asks for (the live worker with the fewest batches
outstanding, so a slow worker gets fewer), and records what each rank has consumed.
Batches never pass through it: the rank calls the worker itself and owns the result.

Everything it knows is journaled, one JSON line per event, to a local file; when Ray
restarts it (``max_restarts=-1``) it replays the journal: the pool's target size, each
rank's position, the counts of reassignments. The workers of the previous incarnation
died with it (an actor's children share its fate); the ranks notice on their next
``ray.get`` and ask again, and the deterministic rule makes the recomputed batch the same.

It is detached (it outlives the rank that made it while other ranks use it), so nothing of
Ray ends it with the job: it holds a lease instead. Every call of a rank renews it (a
rank's loader also calls ``heartbeat`` every quarter of the lease from a thread of its own,
also while the trainer does not iterate); when no rank was heard from for ``lease_s``
seconds (every trainer process killed, say) it stops its workers and itself, and the CPUs
and custom resources they held return to the cluster. A restart renews the lease: the
new incarnation gives the ranks ``lease_s`` from its start.
"""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from ._worker import Worker

# Concurrent calls a worker serves: pending get_batch calls of all ranks together.
WORKER_CONCURRENCY = 64

# The pool ends when no rank was heard from for this long (headrace.ray.Loader's lease_s).
DEFAULT_LEASE_S = 60.0


def worker_options(resources: Dict[str, float]) -> Dict[str, Any]:
    """Ray actor options for a worker needing ``resources`` ({"CPU": 2, "headrace_cpu": 1})."""
    custom = {k: float(v) for k, v in resources.items() if k not in ("CPU", "GPU", "memory")}
    options: Dict[str, Any] = {"num_cpus": float(resources.get("CPU", 0)),
                               "max_concurrency": WORKER_CONCURRENCY}
    if "GPU" in resources:
        options["num_gpus"] = float(resources["GPU"])
    if "memory" in resources:
        options["memory"] = float(resources["memory"])
    if custom:
        options["resources"] = custom
    return options


def node_fits(node: Dict[str, Any], resources: Dict[str, float]) -> bool:
    have = node.get("Resources", {})
    return node.get("Alive", False) and all(have.get(k, 0) >= v for k, v in resources.items())


class Coordinator:
    def __init__(self, name: str, pipeline, workers: int, placement: str,
                 worker_resources: Dict[str, float], cwd: str, journal: str, metrics=None,
                 lease_s: float = DEFAULT_LEASE_S, world_size: int = 1):
        import ray
        self._ray = ray
        self.name = name
        self._pipeline = pipeline
        self._placement = placement
        self._resources = dict(worker_resources)
        self._cwd = cwd
        self._journal_path = journal
        self._metrics = metrics  # (host, base port, world size) or None: worker endpoints
        self._world_size = world_size  # the trainers' ranks (batch.balance deals over them)
        self._target = workers
        self._next_id = 0
        self._workers: Dict[int, Dict[str, Any]] = {}  # id -> {handle, node_id, state, ...}
        self._outstanding: Dict[int, set] = {}  # worker id -> {(rank, k)}
        self._consumed: Dict[int, Tuple[int, int]] = {}  # rank -> (epoch, batch_in_epoch) next
        # rank -> (samples delivered, samples failed) of what it consumed: the run's error
        # budget is checked by each rank against the sum over ranks.
        self._samples: Dict[int, Tuple[int, int]] = {}
        self._reassignments = 0
        self._worker_deaths = 0
        self._restarts = 0
        self._ranks: set = set()
        # The lease: when a rank was last heard from (time.monotonic(); a float the
        # methods write and the lease thread reads), and how many heartbeats came.
        self._lease_s = float(lease_s)
        self._started = time.monotonic()
        self._heard = self._started
        self._heartbeats = 0
        self._journal_lock = threading.Lock()  # the lease thread logs its expiry too
        restarted = ray.get_runtime_context().was_current_actor_reconstructed
        if restarted and os.path.exists(journal):
            self._replay()
            self._restarts += 1
        else:
            os.makedirs(os.path.dirname(journal) or ".", exist_ok=True)
            open(journal, "w").close()  # a new run: a new journal
        self._journal = open(journal, "a", buffering=1)
        self._log({"e": "start", "workers": self._target, "restarts": self._restarts})
        self._info: Optional[Dict[str, Any]] = None
        self._spawn(self._target)
        threading.Thread(target=self._hold_lease, name="headrace-lease", daemon=True).start()

    # --- journal -----------------------------------------------------------------------

    def _log(self, event: Dict[str, Any]) -> None:
        with self._journal_lock:
            self._journal.write(json.dumps(event, separators=(",", ":")) + "\n")

    # --- the lease -----------------------------------------------------------------------

    def _hear(self) -> None:
        self._heard = time.monotonic()

    def _hold_lease(self) -> None:
        """The lease thread: sleeps until the lease would run out, and when no rank was
        heard from since, stops the workers and this actor for good (no restart)."""
        while True:
            left = self._heard + self._lease_s - time.monotonic()
            if left <= 0:
                break
            time.sleep(left)  # a deadline, not a synchronisation: re-checked on waking
        self._log({"e": "expired", "lease_s": self._lease_s})
        for entry in list(self._workers.values()):
            try:
                self._ray.kill(entry["handle"])
            except Exception:
                pass  # dead already
        self._ray.kill(self._ray.get_runtime_context().current_actor, no_restart=True)

    def heartbeat(self, rank: int) -> float:
        """A rank is alive (its loader's thread calls this every quarter of the lease).
        Returns the lease."""
        self._hear()
        self._heartbeats += 1
        return self._lease_s

    def _replay(self) -> None:
        with open(self._journal_path) as f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    break  # a torn last line: the events before it stand
                kind = e.get("e")
                if kind == "start":
                    self._target = e["workers"]
                    self._restarts = e["restarts"]
                elif kind == "scale":
                    self._target = e["workers"]
                elif kind == "spawn":
                    self._next_id = max(self._next_id, e["worker"] + 1)
                elif kind == "ack":
                    self._consumed[e["rank"]] = (e["epoch"], e["batch"])
                    if "samples" in e:
                        self._samples[e["rank"]] = tuple(e["samples"])
                elif kind == "reassign":
                    self._reassignments += 1
                elif kind == "dead":
                    self._worker_deaths += 1
                elif kind == "attach":
                    self._ranks.add(e["rank"])
                elif kind == "detach":
                    self._ranks.discard(e["rank"])

    # --- the pool ------------------------------------------------------------------------

    def _pack_node(self) -> Optional[str]:
        """The node to pack onto: the one with the most live workers, else the first
        alive node with the resources."""
        counts: Dict[str, int] = {}
        for w in self._workers.values():
            if w["node_id"] is not None:
                counts[w["node_id"]] = counts.get(w["node_id"], 0) + 1
        if counts:
            return max(counts, key=counts.get)
        for node in self._ray.nodes():
            if node_fits(node, self._resources):
                return node["NodeID"]
        return None

    def _spawn(self, n: int) -> None:
        """Starts n workers without waiting for them: each is "starting" until its
        info() answers (_refresh), then "live"."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        cpus = int(self._resources.get("CPU", 0))
        for _ in range(n):
            options = worker_options(self._resources)
            node = None
            if self._placement == "spread":
                options["scheduling_strategy"] = "SPREAD"
            else:
                node = self._pack_node()
                if node is not None:
                    options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=True)
            wid = self._next_id
            self._next_id += 1
            handle = self._ray.remote(Worker).options(**options).remote(
                wid, self._pipeline, self._cwd, cpus, self._metrics, self._world_size)
            self._workers[wid] = {"handle": handle, "info_ref": handle.info.remote(),
                                  "node_id": node, "state": "starting", "assigned": 0,
                                  "pid": None, "metrics_url": None}
            self._outstanding[wid] = set()
            self._log({"e": "spawn", "worker": wid})

    def _refresh(self, wait: bool = False) -> None:
        """Starting workers whose info() answered become live; with ``wait``, waits for
        at least one when none is live. A worker that failed to start raises its error
        (a bad manifest path, say): every worker would fail the same way."""
        starting = {v["info_ref"]: w for w, v in self._workers.items()
                    if v["state"] == "starting"}
        if not starting:
            return
        wait_for = 1 if wait and not self._live() else 0
        ready, _ = self._ray.wait(list(starting), num_returns=max(wait_for, 1),
                                  timeout=None if wait_for else 0)
        for ref in ready:
            wid = starting[ref]
            try:
                info = self._ray.get(ref)
            except self._ray.exceptions.RayActorError as e:
                self._remove(wid, kill=False)
                raise RuntimeError(f"headrace.ray: worker {wid} failed to start: {e}") from None
            entry = self._workers[wid]
            entry.update(node_id=info["node_id"], state="live", pid=info["pid"],
                         metrics_url=info.get("metrics_url"))
            if self._info is None:
                self._info = info

    def _live(self) -> List[int]:
        return [w for w, v in self._workers.items() if v["state"] == "live"]

    def _pick(self) -> int:
        self._refresh()
        if not self._live():
            if not any(v["state"] == "starting" for v in self._workers.values()):
                self._spawn(max(1, self._target))
            self._refresh(wait=True)
        return min(self._live(), key=lambda w: (len(self._outstanding[w]), w))

    def _remove(self, wid: int, kill: bool) -> None:
        entry = self._workers.pop(wid, None)
        self._outstanding.pop(wid, None)
        if entry is not None and kill:
            self._ray.kill(entry["handle"])

    # --- what ranks call -----------------------------------------------------------------

    def info(self) -> Dict[str, Any]:
        """The run's shape as a worker sees it (batches per epoch over all ranks, ...)."""
        if self._info is None:
            self._pick()  # waits for the first worker to start
        return dict(self._info)

    def attach(self, rank: int) -> Optional[Tuple[int, int]]:
        """A rank joins; returns what the journal says it consumed up to, if anything."""
        self._hear()
        self._ranks.add(rank)
        self._log({"e": "attach", "rank": rank})
        return self._consumed.get(rank)

    def detach(self, rank: int) -> int:
        """A rank leaves; when none is left the pool is stopped. Returns ranks left."""
        self._hear()
        self._ranks.discard(rank)
        self._log({"e": "detach", "rank": rank})
        if not self._ranks:
            for wid in list(self._workers):
                self._remove(wid, kill=True)
        return len(self._ranks)

    def assign(self, rank: int, batches: List[int]
               ) -> Tuple[List[Tuple[int, Any]], int, Tuple[int, int]]:
        """A worker for each of ``batches`` (run-wide indices) of ``rank``; also the pool's
        size, which the rank's request window follows, and the samples (delivered, failed)
        the other ranks consumed, for the run's error budget."""
        self._hear()
        out = []
        for k in batches:
            wid = self._pick()
            self._outstanding[wid].add((rank, k))
            self._workers[wid]["assigned"] += 1
            out.append((wid, self._workers[wid]["handle"]))
        return out, len(self._live()), self._others(rank)

    def _others(self, rank: int) -> Tuple[int, int]:
        others = [s for r, s in self._samples.items() if r != rank]
        return sum(d for d, _ in others), sum(f for _, f in others)

    def done(self, rank: int, finished: List[Tuple[int, int]], epoch: int, batch: int,
             samples: Optional[Tuple[int, int]] = None) -> None:
        """``rank`` received ``finished`` [(worker, k)]; it will consume (epoch, batch) next.
        ``samples``: (delivered, failed) of everything the rank consumed so far."""
        self._hear()
        for wid, k in finished:
            pending = self._outstanding.get(wid)
            if pending is not None:
                pending.discard((rank, k))
                if not pending and self._workers[wid]["state"] == "draining":
                    self._remove(wid, kill=True)  # scaled down: gone once it has delivered
        self._consumed[rank] = (epoch, batch)
        event = {"e": "ack", "rank": rank, "epoch": epoch, "batch": batch}
        if samples is not None:
            self._samples[rank] = (int(samples[0]), int(samples[1]))
            event["samples"] = list(self._samples[rank])
        self._log(event)

    def died(self, wid: int) -> None:
        """Worker ``wid`` died (a call to it failed): drops it and starts a replacement
        while the pool is under its target. Once per worker, whoever tells first."""
        self._hear()
        if wid in self._workers:
            self._remove(wid, kill=True)
            self._worker_deaths += 1
            self._log({"e": "dead", "worker": wid})
            missing = self._target - sum(v["state"] != "draining" for v in self._workers.values())
            if missing > 0:
                self._spawn(missing)

    def failed(self, rank: int, k: int, wid: int) -> Tuple[int, Any]:
        """``rank``'s call for batch k to worker ``wid`` failed (the worker died): drops the
        worker, starts a replacement while the pool is under its target, and assigns the
        batch to another worker."""
        self.died(wid)
        self._reassignments += 1
        new = self._pick()
        self._outstanding[new].add((rank, k))
        self._workers[new]["assigned"] += 1
        self._log({"e": "reassign", "rank": rank, "batch": k, "from": wid, "to": new})
        return new, self._workers[new]["handle"]

    def scale(self, n: int) -> int:
        """Resizes the pool to n workers: new ones start now; surplus ones take no new
        batches and stop once they delivered their outstanding ones. Returns n."""
        self._target = n
        self._log({"e": "scale", "workers": n})
        self._refresh()
        live = self._live()
        starting = sum(v["state"] == "starting" for v in self._workers.values())
        if n > len(live) + starting:
            self._spawn(n - len(live) - starting)
        elif n < len(live):
            # The least loaded go first.
            for wid in sorted(live, key=lambda w: len(self._outstanding[w]))[:len(live) - n]:
                if self._outstanding[wid]:
                    self._workers[wid]["state"] = "draining"
                else:
                    self._remove(wid, kill=True)
        return n

    def stats(self) -> Dict[str, Any]:
        self._refresh()
        return {
            "name": self.name,
            "target_workers": self._target,
            "workers": [{"worker": w, "node_id": v["node_id"], "state": v["state"],
                         "assigned": v["assigned"], "outstanding": len(self._outstanding[w]),
                         "pid": v["pid"], "metrics_url": v["metrics_url"]}
                        for w, v in sorted(self._workers.items())],
            "reassignments": self._reassignments,
            "worker_deaths": self._worker_deaths,
            "coordinator_restarts": self._restarts,
            "coordinator_node_id": self._ray.get_runtime_context().get_node_id(),
            "consumed": {str(r): list(p) for r, p in self._consumed.items()},
            # Samples (delivered, failed) each rank consumed: the run's error budget's count.
            "samples": {str(r): list(s) for r, s in self._samples.items()},
            "journal": self._journal_path,
            # This incarnation's lease: its length, seconds since it started and since a
            # rank was last heard from, heartbeats received.
            "lease": {"lease_s": self._lease_s, "up_s": time.monotonic() - self._started,
                      "silent_s": time.monotonic() - self._heard,
                      "heartbeats": self._heartbeats},
        }

    def worker_handles(self) -> Dict[int, Any]:
        return {w: v["handle"] for w, v in self._workers.items()}

    def pid(self) -> int:
        return os.getpid()
