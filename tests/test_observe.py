"""End to end: what a running `headrace run` shows (a Prometheus endpoint scraped while it
runs, the progress line) and `headrace report --plot`, through the real binary."""
import re
import socket
import subprocess
import threading
import time
import urllib.request

from e2e_util import read_report, run_headrace, write_config


def scrape_value(url, name):
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    m = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    assert m, text[:2000]
    return float(m.group(1))


def test_the_metrics_endpoint_is_scraped_while_the_run_goes_on(tmp_path, headrace_bin,
                                                               sample_dir):
    config = write_config(tmp_path / "p.yaml", sample_dir)
    report = tmp_path / "r.json"
    # 8 epochs of 6 batches, a 60 ms step: several seconds of run to scrape.
    proc = subprocess.Popen(
        [str(headrace_bin), "run", str(config), "--report", str(report), "--quiet",
         "--metrics-port", "127.0.0.1:0", "--set", "epochs=8", "--set", "trainer.step_ms=60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        m = re.match(r"headrace: metrics at (http://127\.0\.0\.1:\d+/metrics)$", line.strip())
        assert m, line
        url = m.group(1)
        first = scrape_value(url, "headrace_samples_total")
        # The run moves on between scrapes: poll until it has (the process is external,
        # there is no event to wait on); it ends after 384 samples, well after this.
        deadline = time.monotonic() + 120
        later = first
        while later <= first and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
            later = scrape_value(url, "headrace_samples_total")
        assert later > first
        assert scrape_value(url, "headrace_stage_items_total") > 0
        assert scrape_value(url, "headrace_read_latency_seconds_count") > 0
        assert scrape_value(url, "headrace_malloc_heap_bytes") > 0  # state="system" first
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    r = read_report(report)
    assert r["samples"] == 384
    # The run's timeline: one point per second of run, every column the same length.
    timeline = r["timeline"]
    assert timeline["stages"] == ["read", "cpu", "batch"]
    n = len(timeline["t_s"])
    assert n >= 2
    assert all(len(timeline[k]) == n for k in ("samples_per_s", "wait_ratio", "budget_used"))
    assert all(len(u) == n for u in timeline["utilization"])
    assert sum(timeline["samples_per_s"]) > 0
    # Memory over the run: RSS and glibc malloc's heap, taken from the system and in use
    # (the gap is free memory malloc keeps: fragmentation shows as a gap that grows).
    for k in ("rss_bytes", "heap_system_bytes", "heap_in_use_bytes"):
        assert len(timeline[k]) == n, k
    assert all(rss > 0 for rss in timeline["rss_bytes"])
    assert all(0 < used <= held for used, held in
               zip(timeline["heap_in_use_bytes"], timeline["heap_system_bytes"]))
    memory = r["memory"]
    assert 0 < memory["heap_in_use_bytes"] <= memory["heap_system_bytes"]
    assert memory["rss_bytes"] > 0
    assert r["latency_ms"]["read"]["count"] >= 384


def test_a_metrics_port_in_use_fails_before_the_run(tmp_path, headrace_bin, sample_dir):
    config = write_config(tmp_path / "p.yaml", sample_dir)
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    port = held.getsockname()[1]
    try:
        proc = run_headrace(headrace_bin, "run", config, "--report", tmp_path / "r.json",
                            "--metrics-port", f"127.0.0.1:{port}", check=False)
    finally:
        held.close()
    assert proc.returncode == 2
    assert f"127.0.0.1:{port}" in proc.stderr and "in use" in proc.stderr
    assert not (tmp_path / "r.json").exists()
    proc = run_headrace(headrace_bin, "run", config, "--metrics-port", "99999", check=False)
    assert proc.returncode == 2 and "--metrics-port" in proc.stderr


def test_progress_lines_off_a_terminal_and_none_when_quiet(tmp_path, headrace_bin, sample_dir):
    config = write_config(tmp_path / "p.yaml", sample_dir)
    proc = run_headrace(headrace_bin, "run", config, "--progress", "0.2",
                        "--set", "epochs=4", "--set", "trainer.step_ms=50")
    lines = [l for l in proc.stderr.splitlines() if "samples/s" in l]
    assert len(lines) >= 2, proc.stderr
    assert all(l.startswith("headrace: ") and "\r" not in l for l in lines)
    assert re.search(r"batch \d+/24", lines[-1]) and "ETA" in lines[-1]
    quiet = run_headrace(headrace_bin, "run", config, "--progress", "0.2", "--quiet",
                         "--set", "epochs=4", "--set", "trainer.step_ms=50")
    assert "samples/s" not in quiet.stderr and quiet.stdout == ""
    bad = run_headrace(headrace_bin, "run", config, "--progress", "soon", check=False)
    assert bad.returncode == 2 and "--progress" in bad.stderr


def test_report_plot_draws_the_run_as_svg_and_html(tmp_path, headrace_bin, sample_dir):
    config = write_config(tmp_path / "p.yaml", sample_dir)
    report = tmp_path / "r.json"
    run_headrace(headrace_bin, "run", config, "--report", report, "--quiet",
                 "--set", "epochs=4", "--set", "trainer.step_ms=60")
    assert len(read_report(report)["timeline"]["t_s"]) >= 1
    run_headrace(headrace_bin, "report", report, "--plot", tmp_path / "out" / "run.svg")
    svg = (tmp_path / "out" / "run.svg").read_text()
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert "trainer waiting" in svg and "cpu busy" in svg and "<polyline" in svg
    run_headrace(headrace_bin, "report", report, "--plot", tmp_path / "run.html")
    html = (tmp_path / "run.html").read_text()
    assert html.startswith("<!doctype html>") and "<svg" in html and "bottleneck" in html
    for args, says in ((["--plot", tmp_path / "run.png"], ".svg or .html"),
                       (["--plot"], "--plot"),
                       ([], "usage")):
        proc = run_headrace(headrace_bin, "report", report, *args, check=False)
        assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    proc = run_headrace(headrace_bin, "report", tmp_path / "missing.json", "--plot",
                        tmp_path / "x.svg", check=False)
    assert proc.returncode == 2 and "missing.json" in proc.stderr
    (tmp_path / "not-a-report.json").write_text('{"a": 1}')
    proc = run_headrace(headrace_bin, "report", tmp_path / "not-a-report.json", "--plot",
                        tmp_path / "x.svg", check=False)
    assert proc.returncode == 2 and "not a run report" in proc.stderr


def test_a_slow_metrics_client_does_not_keep_a_finished_run_alive(tmp_path, headrace_bin,
                                                                   sample_dir):
    # Issue 26: a client sending a byte every 2 s kept `headrace run` from ever exiting
    # after its report was written (stopping the endpoint waited for it). Here two such
    # clients trickle until the process is gone; it must exit on its own.
    config = write_config(tmp_path / "p.yaml", sample_dir)
    report = tmp_path / "r.json"
    proc = subprocess.Popen(
        [str(headrace_bin), "run", str(config), "--report", str(report), "--quiet",
         "--metrics-port", "127.0.0.1:0", "--set", "trainer.step_ms=20"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    slow = []
    done = threading.Event()
    try:
        line = proc.stderr.readline()
        m = re.match(r"headrace: metrics at http://127\.0\.0\.1:(\d+)/metrics$", line.strip())
        assert m, line
        for _ in range(2):
            s = socket.create_connection(("127.0.0.1", int(m.group(1))), timeout=30)
            s.sendall(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
            slow.append(s)

        def trickle():  # the attacker's pace, not an ordering
            while not done.wait(0.5):
                for s in slow:
                    try:
                        s.sendall(b"x")
                    except OSError:
                        pass

        threading.Thread(target=trickle, daemon=True).start()
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            raise AssertionError("headrace run did not exit while a metrics client trickled")
    finally:
        done.set()
        proc.kill()
        for s in slow:
            s.close()
    assert proc.returncode == 0, err
    assert read_report(report)["samples"] > 0


def test_a_bare_metrics_port_listens_on_loopback_only(tmp_path, headrace_bin, sample_dir):
    config = write_config(tmp_path / "p.yaml", sample_dir)
    proc = subprocess.Popen(
        [str(headrace_bin), "run", str(config), "--quiet", "--metrics-port", "0",
         "--set", "epochs=4", "--set", "trainer.step_ms=50"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        m = re.match(r"headrace: metrics at http://127\.0\.0\.1:(\d+)/metrics$", line.strip())
        assert m, line
        port = int(m.group(1))
        # Bound to 127.0.0.1 itself, not to every interface: /proc/net/tcp lists the
        # listening socket (state 0A) with its local address.
        listening = [l.split()[1] for l in open("/proc/net/tcp").read().splitlines()[1:]
                     if l.split()[3] == "0A"]
        assert f"0100007F:{port:04X}" in listening, listening
        assert f"00000000:{port:04X}" not in listening
        assert scrape_value(f"http://127.0.0.1:{port}/metrics", "headrace_samples_total") >= 0
        proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0
