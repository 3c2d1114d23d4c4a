"""Helpers the benchmark scripts of bench/ share (run as `python bench/X.py`, so this
folder is on sys.path)."""
import re
import subprocess


def bench_ops(binary, config, samples):
    """`headrace bench ops CONFIG`: each operator's single-thread seconds per sample."""
    out = subprocess.run([str(binary), "bench", "ops", str(config), "--samples", str(samples)],
                         check=True, capture_output=True, text=True).stdout
    return {m.group(1): float(m.group(2)) / 1e3
            for m in re.finditer(r"^\s+(\S+\.\S+)\s+([0-9.]+)$", out, re.M)}
