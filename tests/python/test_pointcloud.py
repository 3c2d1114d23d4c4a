"""pointcloud.read -> (pointcloud.augment) -> pointcloud.voxelize end to end on
make-sample's LiDAR-like scenes (KITTI .bin files).

Without augmentation every row must equal a voxelization computed here in numpy from the
sample's own .bin file, by the documented rules (cells floor((p - min) / size) in
float64, first come first served, at most P points per voxel and V voxels). With it, the
transform written beside the voxels must be the one applied, seeded per sample and
epoch.
"""
from pathlib import Path

import numpy as np
import pytest

import headrace

ops = headrace.ops
FIELDS = [{"name": "pointcloud", "kind": "pointcloud", "required": True}]
RANGE = [0.0, -20.0, -3.0, 40.0, 20.0, 1.0]
VOXEL = [0.4, 0.4, 4.0]
MAX_POINTS = 8
MAX_VOXELS = 8000


@pytest.fixture(scope="module")
def scenes(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("scenes")
    stats = headrace.make_sample(str(out), samples=12, seed=5, threads=2, pointcloud=True)
    assert stats["pointcloud_bytes"] > 0
    return out


def cloud(root, index):
    return np.fromfile(root / "pointclouds" / f"{index:06d}.bin", dtype=np.float32).reshape(-1, 4)


def voxelize(points):
    """The reference: (voxels, coords, num_points, count) as the op documents them."""
    lo, hi = np.array(RANGE[:3]), np.array(RANGE[3:])
    points = points[np.all((points[:, :3] >= lo) & (points[:, :3] < hi), axis=1)]  # read's crop
    size = np.array(VOXEL)
    grid = np.round((hi - lo) / size).astype(np.int64)
    cells = np.floor((points[:, :3].astype(np.float64) - lo) / size)
    inside = np.all((cells >= 0) & (cells < grid), axis=1)
    voxels = np.zeros((MAX_VOXELS, MAX_POINTS, 4), np.float32)
    coords = np.zeros((MAX_VOXELS, 3), np.int32)
    num = np.zeros(MAX_VOXELS, np.int32)
    row_of = {}
    for p, c, ok in zip(points, cells.astype(np.int64), inside):
        if not ok:
            continue
        key = (c[2], c[1], c[0])
        row = row_of.get(key)
        if row is None:
            if len(row_of) == MAX_VOXELS:
                continue
            row = row_of[key] = len(row_of)
            coords[row] = key
        if num[row] < MAX_POINTS:
            voxels[row, num[row]] = p
            num[row] += 1
    return voxels, coords, num, len(row_of)


def run(root, augment=False, epochs=1, seed=7):
    chain = [ops.pointcloud_read(format="auto", point_range=RANGE)]
    if augment:
        chain.append(ops.pointcloud_augment(rotation_degrees=[-30, 30], flip_y=0.5,
                                            scale=[0.9, 1.1], transform="augment"))
    chain.append(ops.pointcloud_voxelize(voxel_size=VOXEL, point_range=RANGE,
                                         max_points_per_voxel=MAX_POINTS,
                                         max_voxels=MAX_VOXELS, output="pillars"))
    p = headrace.Pipeline(
        source={"manifest": root / "manifest.jsonl", "fields": FIELDS},
        ops=chain, batch_size=4, seed=seed, cpu_threads=2, memory_budget="256MiB",
        epochs=epochs)
    with headrace.Loader(p) as loader:
        return [[{k: np.asarray(v).copy() for k, v in b.items() if k != "id"} for b in loader]
                for _ in range(epochs)]


def test_voxels_match_numpy_on_each_samples_file(scenes):
    (batches,) = run(scenes)
    seen = 0
    for b in batches:
        assert b["pillars_voxels"].shape == (4, MAX_VOXELS, MAX_POINTS, 4)
        assert b["pillars_voxels"].dtype == np.float32
        assert b["pillars_coords"].dtype == np.int32 and b["pillars_count"].dtype == np.int64
        for row, index in enumerate(b["index"]):
            points = cloud(scenes, int(index))
            voxels, coords, num, count = voxelize(points)
            assert 1000 < count < MAX_VOXELS, count  # a real scene, not the limit
            assert b["pillars_count"][row] == count
            np.testing.assert_array_equal(b["pillars_coords"][row], coords)
            np.testing.assert_array_equal(b["pillars_num_points"][row], num)
            np.testing.assert_array_equal(b["pillars_voxels"][row], voxels)
            seen += 1
    assert seen == 12


def test_the_box_points_land_in_the_boxes_pillars(scenes):
    # Box returns have intensity 0.8, ground 0.2: a pillar holding a box point sits
    # above the ground at a box's place; there are some in every scene.
    (batches,) = run(scenes)
    for b in batches:
        for row in range(len(b["index"])):
            box = b["pillars_voxels"][row][..., 3] == np.float32(0.8)
            assert box.any()
            assert (b["pillars_voxels"][row][box][:, 2] >= np.float32(-1.7)).all()


def test_augmentation_applies_the_transform_it_reports_and_is_seeded(scenes):
    first, second = run(scenes, augment=True, epochs=2)
    again, _ = run(scenes, augment=True, epochs=2)
    for a, b in zip(first, again):
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)  # same seed, same epoch
    epoch0 = {int(i): (b, r) for b in first for r, i in enumerate(b["index"])}
    epoch1 = {int(i): (b, r) for b in second for r, i in enumerate(b["index"])}
    differ = 0
    for index, (b, row) in epoch0.items():
        m = b["augment"][row]
        assert abs(abs(np.linalg.det(m[:2, :2])) - m[2, 2] ** 2) < 1e-4  # rotation x scale
        assert 0.9 <= m[2, 2] <= 1.1
        # Every point kept in a voxel is M p for a point p of the sample's file.
        points = cloud(scenes, index)
        kept = b["pillars_voxels"][row][np.arange(MAX_POINTS) <
                                        b["pillars_num_points"][row][:, None]]
        assert len(kept) > 1000
        moved = points[:, :3] @ m.T
        for q in kept[:200]:
            near = np.abs(moved - q[:3]).max(axis=1).min()
            assert near < 1e-3
        eb, er = epoch1[index]
        differ += not np.array_equal(eb["augment"][er], m)
    assert differ == len(epoch0)  # a new epoch draws new transforms


def test_sample_takes_fixed_size_subsets_of_the_files_points(scenes):
    def sampled(select):
        p = headrace.Pipeline(
            source={"manifest": scenes / "manifest.jsonl", "fields": FIELDS},
            ops=[ops.pointcloud_read(point_range=RANGE),
                 ops.pointcloud_sample(points=2048, select=select, output="points")],
            batch_size=4, seed=3, cpu_threads=2, memory_budget="64MiB", epochs=1)
        with headrace.Loader(p) as loader:
            return [{k: np.asarray(v).copy() for k, v in b.items() if k != "id"} for b in loader]

    lo, hi = np.array(RANGE[:3]), np.array(RANGE[3:])
    for first, rand in zip(sampled("first"), sampled("random")):
        assert first["points"].shape == (4, 2048, 4)
        np.testing.assert_array_equal(first["index"], rand["index"])
        for row, index in enumerate(first["index"]):
            points = cloud(scenes, int(index))
            points = points[np.all((points[:, :3] >= lo) & (points[:, :3] < hi), axis=1)]
            assert len(points) > 2048 and first["points_length"][row] == 2048
            np.testing.assert_array_equal(first["points"][row], points[:2048])
            # A random subset: distinct points of the file, in the file's order.
            where = {tuple(p): i for i, p in enumerate(points)}
            at = [where[tuple(p)] for p in rand["points"][row]]
            assert at == sorted(set(at)) and len(at) == 2048
            assert at[-1] > 2048  # not the prefix
