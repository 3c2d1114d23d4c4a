"""Helpers of the end-to-end tests, imported by the test modules (conftest.py holds the
fixtures; a module of its own avoids the clash between tests/ and tests/python/ conftests)."""
import json
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_headrace(binary, *args, check=True, timeout=300, env=None):
    proc = subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"headrace {' '.join(map(str, args))} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def write_config(path: Path, dataset: Path, **overrides) -> Path:
    """A pipeline config over `dataset` like examples/vqa.yaml, small and fast."""
    batch = overrides.pop("batch_size", 8)
    extra = overrides.pop("extra", "")
    path.write_text(f"""
source:
  manifest: {dataset / 'manifest.jsonl'}
seed: 1
epochs: 1
batch: {{size: {batch}}}
ops:
  - image.decode: {{max_pixels: 89478485}}
  - image.resize: {{shorter_side: 64}}
  - image.center_crop: {{size: 56}}
  - image.normalize: {{dtype: f32, layout: chw}}
  - text.tokenize: {{model: {dataset / 'tokenizer.model'}, max_length: 48}}
execution: {{cpu_threads: 2}}
memory: {{budget_bytes: 64MiB}}
trainer: {{step_ms: 0}}
{extra}
""")
    return path


def read_report(path: Path) -> dict:
    return json.loads(path.read_text())
