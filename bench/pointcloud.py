"""pointcloud.voxelize (and pointcloud.read) points per second, one thread, against a
vectorized numpy voxelization of the same rules.

The cloud is KITTI-sized: a 64-beam spinning LiDAR's sweep (64 x 1800 = 115,200 points,
elevations -24.8..+2 degrees, the ground at -1.73 m, walls 20..80 m away and continuous along
the azimuth), written as a
KITTI .bin. Voxelization is PointPillars' on KITTI (0.16 x 0.16 x 4 m pillars over
[0, 69.12] x [-39.68, 39.68] x [-3, 1], 32 points per pillar, 16,000 pillars).
Headrace's side is `headrace bench ops` (single thread, files read before timing, best
of 3 passes) over a manifest of R records naming the file; the reference is numpy
(np.unique over the cells, a stable sort for each point's place in its pillar; best of
3) producing the same four arrays.

    python bench/pointcloud.py [--bin build/headrace] [--records 20] [--json bench/pointcloud.json]
"""
import argparse
import json
import platform
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from bench_util import bench_ops

REPO = Path(__file__).resolve().parent.parent
RANGE = [0, -39.68, -3, 69.12, 39.68, 1]
VOXEL = [0.16, 0.16, 4]
MAX_POINTS, MAX_VOXELS = 32, 16000


def sweep(seed=0):
    rng = np.random.default_rng(seed)
    elev = np.deg2rad(np.linspace(-24.8, 2.0, 64))[:, None]
    azim = np.linspace(-np.pi, np.pi, 1800, endpoint=False)[None, :]
    ground = np.where(elev < 0, 1.73 / np.tan(-np.minimum(elev, -1e-3)), np.inf)
    # Walls 20..80 m away, continuous along the azimuth as real surroundings are (a
    # beam's neighbouring returns land close together, as in a KITTI scan).
    wall = (50 + 18 * np.sin(3 * azim) + 12 * np.sin(7 * azim + 1)) * np.ones((64, 1))
    r = np.minimum(ground, wall) + rng.normal(0, 0.02, size=(64, 1800))
    x, y, z = r * np.cos(elev) * np.cos(azim), r * np.cos(elev) * np.sin(azim), r * np.sin(elev)
    i = rng.uniform(0, 1, size=(64, 1800))
    return np.stack([x, y, z, i], axis=-1).reshape(-1, 4).astype(np.float32)


def numpy_voxelize(points):
    lo, hi, size = np.array(RANGE[:3]), np.array(RANGE[3:]), np.array(VOXEL)
    grid = np.round((hi - lo) / size).astype(np.int64)
    cells = np.floor((points[:, :3].astype(np.float64) - lo) / size).astype(np.int64)
    keep = np.all((cells >= 0) & (cells < grid), axis=1)
    pts, cells = points[keep], cells[keep]
    key = (cells[:, 2] * grid[1] + cells[:, 1]) * grid[0] + cells[:, 0]
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    row_of_voxel = np.empty(len(first), np.int64)
    row_of_voxel[np.argsort(first, kind="stable")] = np.arange(len(first))  # first come
    row = row_of_voxel[inverse]
    order = np.argsort(row, kind="stable")
    starts = np.searchsorted(row[order], np.arange(len(first)))
    slot = np.empty(len(row), np.int64)
    slot[order] = np.arange(len(row)) - starts[row[order]]
    ok = (row < MAX_VOXELS) & (slot < MAX_POINTS)
    voxels = np.zeros((MAX_VOXELS, MAX_POINTS, 4), np.float32)
    voxels[row[ok], slot[ok]] = pts[ok]
    count = min(len(first), MAX_VOXELS)
    coords = np.zeros((MAX_VOXELS, 3), np.int32)
    coords[row[ok]] = cells[ok][:, ::-1]
    num = np.zeros(MAX_VOXELS, np.int32)
    np.add.at(num, row[ok], 1)
    return voxels, coords, num, count



def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(REPO / "build" / "headrace"))
    ap.add_argument("--records", type=int, default=20)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="headrace-pointcloud-"))
    points = sweep()
    scan = root / "scan.bin"
    points.tofile(scan)
    (root / "scans.jsonl").write_text("".join(
        json.dumps({"id": f"{i:03d}", "pointcloud": str(scan)}) + "\n" for i in range(a.records)))
    config = root / "pointcloud.yaml"
    config.write_text(json.dumps({
        "source": {"manifest": str(root / "scans.jsonl"), "allow_absolute_paths": True,
                   "root": "/", "fields": [{"name": "pointcloud", "kind": "pointcloud",
                                            "required": True}]},
        "ops": [{"pointcloud.read": {"format": "kitti"}},
                {"pointcloud.voxelize": {"voxel_size": VOXEL, "point_range": RANGE,
                                         "max_points_per_voxel": MAX_POINTS,
                                         "max_voxels": MAX_VOXELS}}]}))
    ours = bench_ops(a.bin, config, a.records)

    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        _, _, _, count = numpy_voxelize(points)
        best = min(best, time.perf_counter() - start)
    n = len(points)
    result = {
        "machine": f"{platform.node()} ({platform.machine()})",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "points_per_cloud": n,
        "voxels_per_cloud": int(count),
        "ms": {"read": ours["pointcloud.read"] * 1e3, "voxelize": ours["pointcloud.voxelize"] * 1e3,
               "numpy_voxelize": best * 1e3},
        "voxelize_points_per_s": {"headrace": n / ours["pointcloud.voxelize"], "numpy": n / best},
        "read_points_per_s": n / ours["pointcloud.read"],
    }
    v = result["voxelize_points_per_s"]
    v["ratio"] = v["headrace"] / v["numpy"]
    print(f"{n} points -> {count} pillars")
    print(f"voxelize  headrace {v['headrace'] / 1e6:7.1f} M points/s ({result['ms']['voxelize']:.2f} ms)"
          f"  numpy {v['numpy'] / 1e6:7.1f} M points/s ({result['ms']['numpy_voxelize']:.2f} ms)"
          f"  ratio {v['ratio']:.1f}")
    print(f"read      headrace {result['read_points_per_s'] / 1e6:7.1f} M points/s "
          f"({result['ms']['read']:.2f} ms)")
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
