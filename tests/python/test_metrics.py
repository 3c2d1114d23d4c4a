"""The metrics endpoint of the Python loader: scraped over HTTP while batches flow, the
values move with the batches consumed; bad ports fail before any work."""
import re
import socket
import urllib.request

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
