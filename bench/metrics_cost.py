"""What watching a run costs: `headrace run` throughput with its Prometheus endpoint
scraped every second (and, as a stress, ten times a second) against the same run with no
endpoint, interleaved run by run so that the shared machine's drift hits both alike.

Both sides keep what is always on (the latency histograms, the run monitor's one sample
a second); the endpoint adds an HTTP server thread and one report rendering per scrape.

    python bench/metrics_cost.py --binary build/headrace --config examples/vqa.yaml \
        --runs 5 --json bench/metrics.json
"""
import argparse
import json
import re
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path


def run_once(binary, config, sets, scrape_hz):
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "r.json"
        cmd = [str(binary), "run", str(config), "--quiet", "--progress", "0",
               "--report", str(report)] + [a for s in sets for a in ("--set", s)]
        if scrape_hz:
            cmd += ["--metrics-port", "127.0.0.1:0"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        scrapes = 0
        stop = threading.Event()
        scraper = None
        if scrape_hz:
            url = re.search(r"(http://\S+/metrics)", proc.stderr.readline()).group(1)

            def scrape():
                nonlocal scrapes
                while not stop.wait(1.0 / scrape_hz):
                    try:
                        urllib.request.urlopen(url, timeout=5).read()
                        scrapes += 1
                    except OSError:
                        return  # the run ended
            scraper = threading.Thread(target=scrape)
            scraper.start()
        proc.stderr.read()
        if proc.wait() != 0:
            raise SystemExit(f"run failed: {' '.join(cmd)}")
        stop.set()
        if scraper:
            scraper.join()
        r = json.loads(report.read_text())
        return r["samples_per_s"], scrapes


def scrape_cost(config, n=2000):
    """CPU per scrape, measured directly: a Python loader holding its first batch (the
    engine idle once its prefetch is full) scraped n times from this process. Client and
    server both count: an upper bound on the endpoint's cost."""
    import resource
    import headrace
    loader = headrace.Loader(headrace.Pipeline.from_yaml(config), metrics_port="127.0.0.1:0")
    try:
        next(iter(loader))
        url = loader.metrics_url
        size = len(urllib.request.urlopen(url).read())
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        for _ in range(n):
            urllib.request.urlopen(url).read()
        t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    finally:
        loader.close()
        loader.close_metrics()
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    return {"bytes": size, "wall_ms": 1e3 * (t1 - t0) / n, "cpu_ms": 1e3 * cpu / n}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--binary", default="build/headrace")
    p.add_argument("--config", default="examples/vqa.yaml")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--set", action="append", default=["trainer.step_ms=0"])
    p.add_argument("--json")
    args = p.parse_args()
    sides = {"no endpoint": 0, "scraped 1/s": 1, "scraped 10/s": 10}
    rates = {k: [] for k in sides}
    scrapes = {k: 0 for k in sides}
    for i in range(args.runs):
        for name, hz in sides.items():
            rate, n = run_once(args.binary, args.config, args.set, hz)
            rates[name].append(rate)
            scrapes[name] += n
            print(f"run {i + 1}/{args.runs}  {name:13s} {rate:8.1f} samples/s  ({n} scrapes)",
                  flush=True)
    base = statistics.median(rates["no endpoint"])
    result = {"config": args.config, "sets": args.set, "runs": args.runs, "sides": {}}
    for name in sides:
        med = statistics.median(rates[name])
        result["sides"][name] = {"samples_per_s": rates[name], "median": med,
                                 "ratio_to_no_endpoint": med / base, "scrapes": scrapes[name]}
        print(f"{name:13s} median {med:8.1f} samples/s  ratio {med / base:.3f}")
    per_scrape = scrape_cost(args.config)
    result["per_scrape"] = per_scrape
    print(f"one scrape: {per_scrape['bytes']} bytes, {per_scrape['wall_ms']:.2f} ms wall, "
          f"{per_scrape['cpu_ms']:.2f} ms CPU (client and server)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
