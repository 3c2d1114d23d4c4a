"""tests/wheel/inside.sh's Python check of an installed wheel: headrace.Loader into torch
(zero copy: the tensor's pointer is the engine's), or into numpy through DLPack where
torch is not installed; and OCR through the package's own Tesseract data."""
import re
import sys

import numpy as np

import headrace

ops = headrace.ops
pipeline = headrace.Pipeline(
    source="data/sample/manifest.jsonl",
    ops=[ops.decode(), ops.resize(shorter_side=256), ops.center_crop(224), ops.normalize(),
         ops.tokenize("data/sample/tokenizer.model", max_length=128)],
    batch_size=32, seed=0, epochs=1)
try:
    import torch
except ImportError:
    torch = None
loader = headrace.Loader(pipeline)
batches = 0
for batch in loader:
    if torch is not None:
        image = torch.from_dlpack(batch["image"])
        ids = torch.from_dlpack(batch["input_ids"])
        assert image.data_ptr() == batch.data_ptrs["image"]  # no copy
    else:
        image = np.from_dlpack(batch["image"])
        ids = np.from_dlpack(batch["input_ids"])
        assert image.ctypes.data == batch.data_ptrs["image"]
    assert tuple(image.shape[1:]) == (3, 224, 224) and str(image.dtype).endswith("float32")
    assert ids.shape[1] == 128 and str(ids.dtype).endswith("int64")
    batches += 1
assert batches == len(loader) == 7, (batches, len(loader))
if torch is not None:
    import headrace.torch as ht
    tl = ht.TorchLoader(pipeline)
    first = next(iter(tl))
    assert isinstance(first["image"], torch.Tensor) and first["image"].shape == (32, 3, 224, 224)
into = f"torch {torch.__version__}" if torch is not None else "numpy (DLPack; no torch here)"

# OCR: the recognized text of each page against the words it shows.
ocr = headrace.Pipeline.from_yaml("examples/ocr.yaml")
hits = words = 0
for batch in headrace.Loader(ocr):
    text = np.asarray(batch["ocr_text_utf8"])
    length = np.asarray(batch["ocr_text_length"])
    for row, n, expected in zip(text, length, batch["expected"]):
        got = set(re.findall(r"\w+", bytes(row[:n]).decode().lower()))
        want = re.findall(r"\w+", expected.lower())
        hits += sum(w in got for w in want)
        words += len(want)
assert words and hits / words > 0.9, (hits, words)
print(f"test-wheel [inside]: Python {sys.version.split()[0]}: Loader into {into}, "
      f"{batches} batches; OCR read {hits}/{words} words")
