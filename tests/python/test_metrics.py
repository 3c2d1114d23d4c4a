"""The metrics endpoint of the Python loader: scraped over HTTP while batches flow, the
values move with the batches consumed; bad ports fail before any work."""
import re
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

import headrace


def scrape(url):
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return response.read().decode()


def value(text, name, **labels):
    """The value of series `name` whose labels include `labels` (None if absent)."""
    for line in text.splitlines():
        m = re.match(r"^([a-z_]+)(?:\{(.*)\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        found = dict(re.findall(r'([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        if all(found.get(k) == str(v) for k, v in labels.items()):
            return float(m.group(3))
    return None


def test_the_endpoint_serves_the_run_and_its_values_move(make_pipeline):
    loader = headrace.Loader(make_pipeline(epochs=2), metrics_port="127.0.0.1:0",
                             metrics_labels={"job": "vlm"})
    try:
        url = loader.metrics_url
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/metrics", url)
        it = iter(loader)
        next(it)
        first = scrape(url)
        assert value(first, "headrace_samples_total", rank=0, job="vlm") == 8
        for _ in range(3):
            next(it)
        later = scrape(url)
        assert value(later, "headrace_samples_total", rank=0, job="vlm") == 32
        assert value(later, "headrace_batches_total") == 4
        assert value(later, "headrace_op_latency_seconds_count", op="image.decode") >= 32
        assert value(later, "headrace_read_latency_seconds_count") >= 32
        assert value(later, "headrace_stage_seconds_total", stage="cpu", state="busy") > 0
        assert value(later, "headrace_memory_budget_bytes") == 64 << 20
        assert value(later, "headrace_stage_seconds_total", stage="read", state="busy") >= \
            value(first, "headrace_stage_seconds_total", stage="read", state="busy")
        # The run ends (2 epochs): the engine goes, the endpoint keeps its final values.
        for _ in loader.run():
            pass
        final = scrape(url)
        assert value(final, "headrace_samples_total") == 48  # the second epoch's engine
    finally:
        loader.close()
        loader.close_metrics()
    with pytest.raises(OSError):
        scrape(url)


def test_a_port_in_use_or_a_bad_value_fails_before_any_work(make_pipeline):
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    port = held.getsockname()[1]
    try:
        with pytest.raises(headrace.ConfigError, match=f"127.0.0.1:{port}.*in use"):
            headrace.Loader(make_pipeline(), metrics_port=f"127.0.0.1:{port}")
    finally:
        held.close()
    for bad in (-1, 70000, "x", ":9100", True):
        with pytest.raises(headrace.ConfigError, match="metrics_port"):
            headrace.Loader(make_pipeline(), metrics_port=bad)
    with pytest.raises(headrace.ConfigError, match="metrics_labels"):
        headrace.Loader(make_pipeline(), metrics_port=0, metrics_labels={"bad-name": "x"})


def test_a_bare_port_listens_on_loopback(make_pipeline):
    loader = headrace.Loader(make_pipeline(), metrics_port=0)
    try:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/metrics", loader.metrics_url)
    finally:
        loader.close_metrics()


def test_a_trickling_client_does_not_keep_the_process_alive(py_sample, tmp_path):
    # Issue 26: a client sending a byte every 2 s kept a Python process that used
    # Loader(metrics_port=...) from ever exiting (closing the endpoint at exit waited for
    # it). The child prints its port, waits for the client to connect, then ends.
    script = tmp_path / "child.py"
    script.write_text(f"""
import sys
from pathlib import Path
sys.path.insert(0, {str(Path(__file__).parent)!r})
from conftest import small_pipeline
import headrace
loader = headrace.Loader(small_pipeline(Path({str(py_sample)!r})), metrics_port="127.0.0.1:0")
for batch in loader:
    break
print(loader.metrics_url.rsplit(":", 1)[1].split("/")[0], flush=True)
sys.stdin.readline()  # the client is connected and trickling
""")
    child = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    done = threading.Event()
    client = None
    try:
        port = int(child.stdout.readline())
        client = socket.create_connection(("127.0.0.1", port), timeout=30)
        client.sendall(b"GET /metrics HTTP/1.1\r\nX-Slow: ")

        def trickle():  # the attacker's pace, not an ordering
            while not done.wait(0.5):
                try:
                    client.sendall(b"x")
                except OSError:
                    return

        threading.Thread(target=trickle, daemon=True).start()
        child.stdin.write("go\n")
        child.stdin.flush()
        try:
            assert child.wait(timeout=120) == 0
        except subprocess.TimeoutExpired:
            raise AssertionError("the process did not exit while a metrics client trickled")
    finally:
        done.set()
        child.kill()
        if client is not None:
            client.close()
