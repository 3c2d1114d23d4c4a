"""tests/wheel/inside.sh's Parquet check of an installed wheel, beside whichever pyarrow
the environment holds: Parquet tables written with that pyarrow from data/sample, read by
the CLI and, in this process after `import pyarrow`, by headrace.Loader (one libarrow in
the process: pyarrow's, which the engine's Arrow bridge loads too). Batches must be the
manifest's, byte for byte.

    python parquet_check.py EXPECTED_PYARROW_VERSION
"""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import headrace

expected = sys.argv[1]
assert pa.__version__ == expected, (pa.__version__, expected)
sample = Path("data/sample")
out = Path(f"out/parquet-{pa.__version__}")
out.mkdir(parents=True, exist_ok=True)
rows = [json.loads(line) for line in (sample / "manifest.jsonl").read_text().splitlines()]
for f in range(2):
    part = rows[f * len(rows) // 2:(f + 1) * len(rows) // 2]
    pq.write_table(pa.table({
        "id": [r["id"] for r in part],
        "image": pa.array([(sample / r["image"]).read_bytes() for r in part], type=pa.binary()),
        "conversations": [json.dumps(r["conversations"]) for r in part],
    }), out / f"part-{f:05d}.parquet", row_group_size=32)
source = f"source.parquet={out}/part-{{00000..00001}}.parquet"
flags = ["--quiet", "--digests", "--set", "shuffle=false", "--set", "epochs=1",
         "--set", "trainer.step_ms=0"]


def cli(report, *sets):
    run = subprocess.run(["headrace", "run", "examples/vqa.yaml", "--report", str(report), *flags,
                          *sets], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return json.loads(report.read_text())


manifest = cli(out / "manifest.json")
parquet = cli(out / "parquet.json", "--set", "source.manifest=", "--set", source)
assert parquet["source"].startswith("parquet "), parquet["source"]
assert parquet["errors"]["total"] == 0 and parquet["samples"] == len(rows), parquet["samples"]
assert parquet["batch_digests"] == manifest["batch_digests"]

# In this process, pyarrow imported first: the extension's bridge uses the same libarrow.
pipeline = headrace.Pipeline.from_yaml(
    "examples/vqa.yaml", ["source.manifest=", source, "shuffle=false", "epochs=1"])
samples = sum(np.from_dlpack(batch["input_ids"]).shape[0] for batch in headrace.Loader(pipeline))
assert samples == len(rows), samples
maps = [line for line in Path("/proc/self/maps").read_text().splitlines() if "libarrow.so" in line]
assert len({line.split()[-1] for line in maps}) == 1, maps  # one libarrow file mapped
print(f"test-wheel [inside]: pyarrow {pa.__version__}: Parquet read by the CLI (batches = the "
      f"manifest's) and by the Loader beside `import pyarrow` ({samples} samples)")
