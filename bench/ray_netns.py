"""`make bench-ray-netns` (root): headrace.ray pack vs spread over rate-limited links.

Needs root and `ip netns`: it builds a small network on this machine, runs a Ray cluster
on it, and removes both again, whatever happens.

    hr-trainer 10.77.0.1   hr-cpu1 10.77.0.11   hr-cpu2 10.77.0.12      network namespaces
      Ray head, 0 CPUs       Ray node, 2 CPUs     Ray node, 2 CPUs
      the driver (rank 0)    headrace_cpu: 2      headrace_cpu: 2
           eth0                  eth0 [tbf R]         eth0 [tbf R]     <- shaped egress
            |                     |                    |
           p-trainer          p-cpu1 [tbf R]       p-cpu2 [tbf R]      <- shaped egress
            +---------------- br0 (namespace hr-sw) ---+

The CPU nodes' links carry R Mbit/s each way (tbf on both ends of their veth pair); the
trainer's is unshaped: CPU nodes with small NICs feeding a trainer with a big one. The
bridge sits in a namespace of its own rather than in the root namespace: nothing of the
host's network (its routes, firewall, br_netfilter) is touched, and deleting the four
namespaces removes every bridge, veth and qdisc.

Rungs (--rungs RATE:STEP_MS,...): a link rate and a trainer step (a sleep per batch; with
none the rank never waits on purpose and its wait-time ratio is ~1 by construction). In
each rung, sides (--sides) run interleaved, the order rotating and reversing from round to
round, --runs rounds: headrace.ray.Loader with 2 workers (1 CPU and 1 headrace_cpu each)
placed "pack" (both on one CPU node: one link carries every batch) or "spread" (one per
CPU node), as the library does it (the rank starts pulling every batch it requested onto
its node at request time: `_Stream._fill`), optionally with "+pfN": the rank's request
window set to N batches (`prefetch=N`) instead of the library's default (recorded in the
JSON as default_prefetch). Each run is one epoch of examples/vqa.yaml (1000 samples, batch
32, 1 engine thread per worker), clocked from the first batch as bench/ray_streaming.py
does. Per run: samples/s, the rank's wait-time ratio, the bytes each node's NIC sent (veth
counters), the tbf drops, and the node each worker ran on.

Process hygiene: `ray stop` kills every Ray process of the machine (it matches process
names host-wide), so it is not used; the Ray processes this script starts all live in its
namespaces, and teardown ends exactly those (`ip netns pids`), then deletes the namespaces.
"""
import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SWITCH = "hr-sw"
# name -> (namespace, address); the trainer is the Ray head and runs the driver.
NODES = {"trainer": ("hr-trainer", "10.77.0.1"),
         "cpu1": ("hr-cpu1", "10.77.0.11"),
         "cpu2": ("hr-cpu2", "10.77.0.12")}
CPU_NODES = ("cpu1", "cpu2")
NAMESPACES = [SWITCH] + [ns for ns, _ in NODES.values()]
GCS_PORT = 6379
TEMP = "/tmp/headrace-netns"  # each node's Ray temp dir under it (not the host's /tmp/ray)
WORKER = {"CPU": 1, "headrace_cpu": 1}


def sh(*args, check=True):
    proc = subprocess.run(args, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(args)}` failed ({proc.returncode}): "
                           f"{proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


# --- the network -------------------------------------------------------------------------

def preflight():
    if os.geteuid() != 0:
        sys.exit("bench/ray_netns.py needs root (it creates network namespaces, veth pairs "
                 "and tc qdiscs): run `sudo make bench-ray-netns`")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            sys.exit(f"bench/ray_netns.py needs `{tool}` (iproute2) on PATH")
    if subprocess.run(["ip", "netns", "list"], capture_output=True).returncode != 0:
        sys.exit("bench/ray_netns.py: `ip netns` is unavailable here (no network namespace "
                 "support, or no CAP_SYS_ADMIN in this container)")


def namespace_pids(ns):
    out = sh("ip", "netns", "pids", ns, check=False)
    return [int(p) for p in out.split()]


def kill_namespace_processes(grace_s=15.0):
    """Ends every process in this script's namespaces: the Ray processes it started (and
    those a crashed earlier run of it left), nothing else."""
    existing = set(sh("ip", "netns", "list").split())
    spaces = [ns for ns in NAMESPACES if ns in existing]
    pids = [p for ns in spaces for p in namespace_pids(ns)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            pids = [p for ns in spaces for p in namespace_pids(ns)]
            if not pids:
                return
            time.sleep(0.2)
    if pids:
        print(f"warning: processes {pids} survived SIGKILL", file=sys.stderr)


def teardown(keep_temp=False):
    kill_namespace_processes()
    existing = set(sh("ip", "netns", "list").split())
    for ns in NAMESPACES:
        if ns in existing:
            sh("ip", "netns", "delete", ns, check=False)  # its veths, bridge, qdiscs go too
    if not keep_temp:
        shutil.rmtree(TEMP, ignore_errors=True)


def setup_network():
    sh("ip", "netns", "add", SWITCH)
    sh("ip", "-n", SWITCH, "link", "set", "lo", "up")
    sh("ip", "-n", SWITCH, "link", "add", "br0", "type", "bridge")
    sh("ip", "-n", SWITCH, "link", "set", "br0", "up")
    for name, (ns, addr) in NODES.items():
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", SWITCH, "link", "add", f"p-{name}", "type", "veth",
           "peer", "name", "eth0", "netns", ns)
        sh("ip", "-n", SWITCH, "link", "set", f"p-{name}", "master", "br0", "up")
        sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        # A route for every destination: Ray finds a process's own address by "connecting"
        # a UDP socket to a public address (no packet is sent).
        sh("ip", "-n", ns, "route", "add", "default", "dev", "eth0")
    # Reachable: a TCP connection to a closed port of each CPU node is refused (a reset
    # came back), not timed out.
    probe = ("import socket, sys\n"
             "for a in sys.argv[1:]:\n"
             "    try: socket.create_connection((a, 9), timeout=5).close()\n"
             "    except ConnectionRefusedError: pass\n")
    sh("ip", "netns", "exec", NODES["trainer"][0], sys.executable, "-c", probe,
       *(NODES[name][1] for name in CPU_NODES))


def shaped_links():
    """(namespace, device) of each shaped egress: both ends of each CPU node's link."""
    return [(ns, dev) for name in CPU_NODES
            for ns, dev in ((NODES[name][0], "eth0"), (SWITCH, f"p-{name}"))]


def set_rate(mbit):
    """Every CPU node's link at ``mbit`` Mbit/s each way (tbf); None: unshaped."""
    for ns, dev in shaped_links():
        if mbit is None:
            sh("tc", "-n", ns, "qdisc", "del", "dev", dev, "root", check=False)
        else:
            # The bucket holds 10 ms at the rate (and at least two 64 KiB GSO packets); a
            # packet waits at most 50 ms in the queue before tbf drops it.
            burst = max(128 << 10, int(mbit * 1e6 / 8 / 100))
            sh("tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf",
               "rate", f"{mbit}mbit", "burst", str(burst), "latency", "50ms")


def counters():
    """Bytes each node's NIC sent and received, and the tbf drops on the CPU links."""
    out = {}
    for name, (ns, _) in NODES.items():
        link, = json.loads(sh("ip", "-n", ns, "-s", "-j", "link", "show", "dev", "eth0"))
        out[name] = {"tx": link["stats64"]["tx"]["bytes"], "rx": link["stats64"]["rx"]["bytes"]}
    drops = 0
    for ns, dev in shaped_links():
        for q in json.loads(sh("tc", "-n", ns, "-s", "-j", "qdisc", "show", "dev", dev)):
            drops += q.get("drops", 0)
    out["tbf_drops"] = drops
    return out


# --- the Ray cluster ---------------------------------------------------------------------

def ray_start(name, head, object_store):
    ns, addr = NODES[name]
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    args = ["ip", "netns", "exec", ns, ray_bin, "start", f"--node-ip-address={addr}",
            f"--object-store-memory={object_store}", f"--temp-dir={TEMP}/{name}",
            "--disable-usage-stats"]
    if head:
        args += ["--head", f"--port={GCS_PORT}", "--num-cpus=0", "--include-dashboard=false"]
    else:
        args += [f"--address={NODES['trainer'][1]}:{GCS_PORT}", "--num-cpus=2",
                 '--resources={"headrace_cpu": 2}']
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run(args, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"ray start on {name} failed:\n{proc.stdout}\n{proc.stderr}")


def orchestrate(args):
    preflight()
    os.chdir(REPO)

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    teardown()  # a crashed earlier run's namespaces and Ray processes
    try:
        setup_network()
        store = int(args.object_store_gib * (1 << 30))
        ray_start("trainer", True, store)
        for name in CPU_NODES:
            ray_start(name, False, store)
        trainer_ns, head_ip = NODES["trainer"]
        status = subprocess.run(["ip", "netns", "exec", trainer_ns,
                                 os.path.join(os.path.dirname(sys.executable), "ray"), "status",
                                 f"--address={head_ip}:{GCS_PORT}"],
                                capture_output=True, text=True)
        print(status.stdout.strip() or status.stderr.strip(), flush=True)
        driver = ["ip", "netns", "exec", trainer_ns, sys.executable, os.path.abspath(__file__),
                  "--driver", "--config", args.config, "--json", args.json,
                  "--rungs", args.rungs, "--sides", args.sides, "--runs", str(args.runs),
                  "--object-store-gib", str(args.object_store_gib)]
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
        env.pop("RAY_ADDRESS", None)
        rc = subprocess.run(driver, cwd=REPO, env=env).returncode
        if rc != 0:
            raise RuntimeError(f"the driver failed ({rc})")
    except KeyboardInterrupt:
        teardown()
        sys.exit("interrupted: the namespaces and the Ray processes in them are removed")
    except BaseException:
        teardown(keep_temp=True)
        print(f"Ray's logs are kept in {TEMP}/*/session_latest/logs", file=sys.stderr)
        raise
    teardown()


# --- the driver (in the trainer's namespace) -----------------------------------------------

def pipeline(config):
    import headrace
    return headrace.Pipeline.from_yaml(
        config, overrides={"execution.cpu_threads": 1, "epochs": 1})


def wait_for_nodes(ray, n, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [x for x in ray.nodes() if x["Alive"]]
        if len(alive) >= n:
            return alive
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(alive)} of {n} Ray nodes joined within {timeout_s} s")
        time.sleep(0.5)


def one_run(config, side, step_s, node_names):
    """One epoch with 2 workers; the trainer sleeps ``step_s`` after each batch. ``side``:
    the placement ("pack" or "spread"), then optionally "+pfN" (the rank's request window,
    ``prefetch=N``; without it the library's default)."""
    import headrace.ray as hray
    placement, *options = side.split("+")
    prefetch = None
    for option in options:
        if option.startswith("pf") and option[2:].isdigit():
            prefetch = int(option[2:])
        else:
            raise SystemExit(f"unknown option {option!r} in side {side!r}")
    return _one_run(hray, config, side, placement, step_s, node_names, prefetch)


def _one_run(hray, config, side, placement, step_s, node_names, prefetch=None):
    loader = hray.Loader(pipeline(config), workers=2, placement=placement,
                         worker_resources=WORKER, prefetch=prefetch)
    try:
        deadline = time.monotonic() + 120
        while True:  # the pool up before the clock starts: startup is not measured here
            workers = loader.pool_stats()["workers"]
            if sum(w["state"] == "live" for w in workers) == 2:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("workers did not start")
            time.sleep(0.1)
        where = {w["worker"]: node_names.get(w["node_id"], w["node_id"]) for w in workers}
        load = os.getloadavg()[0]
        before = counters()
        start = time.perf_counter()
        first = None
        samples = 0
        for batch in loader:
            if first is None:
                first = time.perf_counter()
            else:
                samples += len(batch["index"])
            if step_s:
                time.sleep(step_s)
        end = time.perf_counter()
        after = counters()
        stats = loader.stats()
    finally:
        loader.close()
    elapsed = end - start
    by_node = {}
    for wid, n in stats.get("batches_by_worker", {}).items():
        node = where.get(int(wid), "?")
        by_node[node] = by_node.get(node, 0) + n
    sent = {name: after[name]["tx"] - before[name]["tx"] for name in NODES}
    return {
        "side": side,
        # Steady samples/s: from the first batch on (as bench/ray_streaming.py).
        "samples_per_s": samples / (end - first),
        "time_to_first_batch_s": first - start,
        "wait_time_ratio": stats["wait_time_ratio"],
        "batches": stats["batches"],
        "worker_nodes": sorted(where.values()),
        "batches_by_node": by_node,
        "bytes_sent": sent,
        "trainer_bytes_received": after["trainer"]["rx"] - before["trainer"]["rx"],
        "cpu_link_mbit_s": {n: sent[n] * 8 / elapsed / 1e6 for n in CPU_NODES},
        "tbf_drops": after["tbf_drops"] - before["tbf_drops"],
        "bytes_moved": stats["bytes_moved"],
        "load_1min": load,
    }


def parse_rungs(text):
    """"200:0,200:500,none:0" -> [(200.0, 0.0), (200.0, 0.5), (None, 0.0)]: (link Mbit/s,
    trainer step s)."""
    out = []
    for item in text.split(","):
        rate, _, step = item.partition(":")
        out.append((None if rate in ("none", "0") else float(rate), float(step or 0) / 1000))
    return out


def drive(args):
    import ray
    from headrace.ray.loader import default_prefetch
    os.chdir(REPO)
    _, head_ip = NODES["trainer"]
    ray.init(address=f"{head_ip}:{GCS_PORT}", _node_ip_address=head_ip, namespace="headrace",
             log_to_driver=False)
    nodes = wait_for_nodes(ray, len(NODES))
    by_ip = {addr: name for name, (_, addr) in NODES.items()}
    node_names = {x["NodeID"]: by_ip.get(x["NodeManagerAddress"], x["NodeManagerAddress"])
                  for x in nodes}
    for x in nodes:
        offered = {k: v for k, v in x["Resources"].items() if k in ("CPU", "headrace_cpu")}
        print(f"Ray node {node_names[x['NodeID']]} {x['NodeManagerAddress']} {offered}")
    sides = args.sides.split(",")
    results = {"machine": f"{platform.node()} {os.cpu_count()} CPUs",
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "config": args.config, "workers": 2, "worker_resources": WORKER,
               # The request window of the sides without +pfN (the library's default).
               "default_prefetch": default_prefetch(2),
               "object_store_gib": args.object_store_gib, "runs_per_side": args.runs,
               "rungs": []}
    try:
        # A discarded warm-up on unshaped links: the first actors of a cluster start slower.
        set_rate(None)
        one_run(args.config, "spread", 0, node_names)
        for rate, step in parse_rungs(args.rungs):
            set_rate(rate)
            rung = {"rate_mbit": rate, "step_ms": step * 1000, "runs": []}
            for i in range(args.runs):
                # Every side once a round; the order rotates and reverses between rounds,
                # so no side always runs first or after the same one.
                k = i % len(sides)
                order = sides[k:] + sides[:k]
                for side in (order if i % 2 == 0 else order[::-1]):
                    run = one_run(args.config, side, step, node_names)
                    run["round"] = i
                    rung["runs"].append(run)
                    print(f"{rate or 'unshaped'} Mbit/s, step {step * 1000:.0f} ms, "
                          f"{side:>15}: {run['samples_per_s']:6.1f} samples/s, wait ratio "
                          f"{run['wait_time_ratio']:.3f}, workers on "
                          f"{','.join(run['worker_nodes'])}, MB sent "
                          f"{ {n: round(v / 1e6, 1) for n, v in run['bytes_sent'].items()} }, "
                          f"CPU links Mbit/s "
                          f"{ {n: round(v) for n, v in run['cpu_link_mbit_s'].items()} }, "
                          f"tbf drops {run['tbf_drops']}, load {run['load_1min']:.1f}",
                          flush=True)
            summarize(rung, sides)
            results["rungs"].append(rung)
            with open(args.json, "w") as f:  # what has been measured survives a failure
                json.dump(results, f, indent=1)
    finally:
        set_rate(None)
        ray.shutdown()
    print_table(results, sides)


def summarize(rung, sides):
    """Medians per side, and each side's samples/s over "pack"'s of the same round."""
    runs = rung["runs"]
    rounds = sorted({r["round"] for r in runs})
    for side in sides:
        mine = [r for r in runs if r["side"] == side]
        out = {
            "samples_per_s": statistics.median(r["samples_per_s"] for r in mine),
            "samples_per_s_all": [round(r["samples_per_s"], 1) for r in mine],
            "wait_time_ratio": statistics.median(r["wait_time_ratio"] for r in mine),
            "wait_time_ratio_all": [round(r["wait_time_ratio"], 3) for r in mine],
            "busiest_link_mbit_s": statistics.median(max(r["cpu_link_mbit_s"].values())
                                                     for r in mine),
            "mb_sent": {n: statistics.median(r["bytes_sent"][n] for r in mine) / 1e6
                        for n in NODES},
            "worker_nodes": sorted({",".join(r["worker_nodes"]) for r in mine}),
        }
        if "pack" in sides:
            pack = {r["round"]: r["samples_per_s"] for r in runs if r["side"] == "pack"}
            mine_by_round = {r["round"]: r["samples_per_s"] for r in mine}
            ratios = [mine_by_round[i] / pack[i] for i in rounds]
            out.update(over_pack=statistics.median(ratios),
                       over_pack_all=[round(x, 2) for x in ratios])
        rung[side] = out
    rung["load_1min"] = [min(r["load_1min"] for r in runs), max(r["load_1min"] for r in runs)]


def print_table(results, sides):
    print(f"\n{'link Mbit/s':>11} {'step ms':>7} {'side':>15} {'samples/s':>9} "
          f"{'/ pack':>6} {'wait ratio':>10} {'busiest link':>12}  {'MB sent cpu1/cpu2':>17}"
          f"  workers on")
    for rung in results["rungs"]:
        for side in sides:
            s = rung[side]
            print(f"{rung['rate_mbit'] or 'unshaped':>11} {rung['step_ms']:>7.0f} {side:>15} "
                  f"{s['samples_per_s']:>9.1f} {s.get('over_pack', float('nan')):>6.2f} "
                  f"{s['wait_time_ratio']:>10.3f} {s['busiest_link_mbit_s']:>12.0f}  "
                  f"{s['mb_sent']['cpu1']:>8.0f}/{s['mb_sent']['cpu2']:<8.0f}  "
                  f"{' | '.join(s['worker_nodes'])}")
        print(f"{'':>24} load {rung['load_1min'][0]:.1f}-{rung['load_1min'][1]:.1f}")


def main():
    ap = argparse.ArgumentParser(
        description="headrace.ray pack vs spread over rate-limited links between network "
                    "namespaces. Needs root and `ip netns` (run `sudo make bench-ray-netns`).")
    ap.add_argument("--config", default="examples/vqa.yaml")
    ap.add_argument("--json", default="bench/ray_netns.json")
    ap.add_argument("--rungs", default="200:0,200:500,none:0",
                    help="RATE:STEP_MS,...: each CPU node's link in Mbit/s (none: unshaped) "
                         "and the trainer's step per batch (a sleep)")
    ap.add_argument("--sides", default="pack,spread,spread+pf6,spread+pf8,spread+pf12,pack+pf8",
                    help="what each rung compares: a placement (pack, spread), optionally "
                         "+pfN (the rank's request window, prefetch=N; without it the "
                         "library's default)")
    ap.add_argument("--runs", type=int, default=3, help="runs of each side in each rung")
    ap.add_argument("--object-store-gib", type=float, default=1.0,
                    help="each Ray node's object store")
    ap.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.driver:
        drive(args)
    else:
        orchestrate(args)


if __name__ == "__main__":
    main()
