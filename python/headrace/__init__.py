"""Headrace: multimodal preprocessing in C++, zero-copy batches for Python and PyTorch.

    import headrace
    pipeline = headrace.Pipeline(
        source="data/sample/manifest.jsonl",
        ops=[headrace.ops.decode(), headrace.ops.resize(shorter_side=256),
             headrace.ops.center_crop(224), headrace.ops.normalize(),
             headrace.ops.tokenize("data/sample/tokenizer.model", max_length=128)],
        batch_size=64, seed=0)
    loader = headrace.Loader(pipeline)      # rank/world size from torch.distributed or torchrun
    for epoch in range(3):
        for batch in loader:                # one epoch per `for`, each its own shuffle
            image = torch.from_dlpack(batch["image"])   # no copy

See python/README.md.
"""
import os as _os

from . import _cli

# The wheel ships Tesseract's English model and make-sample's font: ocr.text reads
# TESSDATA_PREFIX, the OCR page renderer HEADRACE_FONT; a user's own setting wins.
_cli.use_bundled_environment()

try:
    from . import _headrace
except ImportError as _error:
    # A vendored library that needs a newer glibc than this system's: say which, and what
    # glibc it needs, instead of the loader's one line (python/headrace/_loadcheck.py).
    from . import _loadcheck
    _why = _loadcheck.explain(_error)
    if _why is None:
        raise
    raise ImportError(_why, name=__name__ + "._headrace") from _error

# HEADRACE_CRASH_TRACE=1: a fatal signal in any thread writes that thread's native stack
# to stderr before faulthandler's Python stacks (src/headrace/observe/crash_trace.h).
if _os.environ.get("HEADRACE_CRASH_TRACE"):
    _headrace._install_crash_trace()

from . import ops
from ._headrace import (CancelledError, ConfigError, Error, Tensor, kept_memory, make_sample,
                        release_memory)
from .batch import Batch
from .doctor import doctor
from .loader import Loader, default_rank_and_world_size, merge_state_dicts
from .pipeline import Pipeline
from .size_index import build_size_index

__all__ = ["Batch", "CancelledError", "ConfigError", "Error", "Loader", "Pipeline", "Tensor",
           "build_size_index", "default_rank_and_world_size", "merge_state_dicts", "doctor", "kept_memory", "make_sample",
           "ops", "release_memory"]
__version__ = "0.1.0"
