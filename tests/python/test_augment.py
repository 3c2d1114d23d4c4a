"""Image augmentation ops (issue 11): seeded per (seed, epoch, index), so a re-run of an
epoch is identical and a new epoch differs; and one op against a numpy reference."""
import numpy as np

import headrace
from headrace import ops

AUGMENT = [
    ops.color_jitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1, p=0.8),
    ops.grayscale(p=0.2),
    ops.gaussian_blur(5, sigma=[0.1, 2.0], p=0.5),
    ops.rand_augment(num_ops=2, magnitude=9),
]


def first_batch_images(loader):
    batch = next(iter(loader))
    assert [int(i) for i in np.asarray(batch["index"])][:2] == [0, 1]
    return np.asarray(batch["image"]).copy()


def test_epochs_differ_and_a_rerun_epoch_is_identical(make_pipeline):
    loader = headrace.Loader(make_pipeline(shuffle=False, extra_ops=AUGMENT))
    epoch0, epoch1 = first_batch_images(loader), first_batch_images(loader)
    assert epoch0.shape == (8, 3, 56, 56)
    # Every sample is augmented anew each epoch (RandAugment's 2 ops alone differ).
    assert all(not np.array_equal(a, b) for a, b in zip(epoch0, epoch1))
    # The same epoch again, from a fresh loader and after set_epoch: bit-identical.
    again = headrace.Loader(make_pipeline(shuffle=False, extra_ops=AUGMENT))
    assert np.array_equal(first_batch_images(again), epoch0)
    loader.set_epoch(1)
    assert np.array_equal(first_batch_images(loader), epoch1)
    # Not the un-augmented images.
    plain = first_batch_images(headrace.Loader(make_pipeline(shuffle=False)))
    assert not np.array_equal(plain, epoch0)


def pixels(py_sample, *extra):
    """The first batch's images (decode, resize 64, crop 56, `extra`) as integers, HWC,
    through normalize with mean 0 and std 1 (v / 255, exact enough to round back)."""
    pipeline = headrace.Pipeline(
        source=py_sample / "manifest.jsonl",
        ops=[ops.decode(), ops.resize(shorter_side=64), ops.center_crop(56), *extra,
             ops.normalize(mean=[0, 0, 0], std=[1, 1, 1])],
        batch_size=8, seed=1, cpu_threads=2, memory_budget="64MiB", shuffle=False)
    images = first_batch_images(headrace.Loader(pipeline))
    return np.rint(images * 255).astype(np.int64).transpose(0, 2, 3, 1)


def test_grayscale_matches_a_numpy_bt601_reference(py_sample):
    rgb = pixels(py_sample)
    gray = pixels(py_sample, ops.grayscale(p=1.0))
    # PIL's convert("L"): R 19595 + G 38470 + B 7471, rounded, >> 16.
    expected = (rgb[..., 0] * 19595 + rgb[..., 1] * 38470 + rgb[..., 2] * 7471 + 0x8000) >> 16
    for c in range(3):
        assert np.array_equal(gray[..., c], expected)
    assert rgb.std() > 10  # colourful input: the check can fail


def test_brightness_is_one_factor_per_image_like_numpy(py_sample):
    # color_jitter with brightness only: each image is trunc(clip(f * v)) for one factor
    # f drawn from [0.7, 1.3]. Each pixel bounds f to [dst / v, (dst + 1) / v); they must
    # all agree on a non-empty interval inside the range.
    rgb = pixels(py_sample)
    out = pixels(py_sample, ops.color_jitter(brightness=0.3))
    factors = []
    for src, dst in zip(rgb, out):
        assert np.all(dst[src == 0] == 0)
        v, d = src[(src > 0) & (dst < 255)], dst[(src > 0) & (dst < 255)]
        lo, hi = np.max(d / v), np.min((d + 1) / v)
        assert lo <= hi + 1e-6, (lo, hi)
        assert np.all(src[dst == 255] * hi >= 255 - 1e-3)
        assert 0.7 - 1e-6 <= lo and hi <= 1.3 + 1e-2
        factors.append(lo)
    assert len(set(np.round(factors, 4))) == len(factors)  # a factor per sample
