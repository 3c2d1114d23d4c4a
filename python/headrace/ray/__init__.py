"""headrace.ray: disaggregated streaming. CPU worker actors on other nodes compute the
batches; each trainer rank pulls its own straight from them, by reference.

    import headrace, headrace.ray
    loader = headrace.ray.Loader(pipeline, workers=4, placement="spread",
                                 worker_resources={"CPU": 2, "headrace_cpu": 1})
    for epoch in range(3):
        for batch in loader:          # the same batches as headrace.Loader for this rank
            ...
    loader.scale(8)                   # while training runs
    loader.stats()["wait_time_ratio"], loader.stats()["workers"]
    headrace.ray.build_size_index(pipeline)   # batch.balance.index, sized on the cluster

See README.md in this folder.
"""
from .loader import Loader
from .size_index import build_size_index

__all__ = ["Loader", "TorchLoader", "build_size_index"]


def __getattr__(name):
    if name == "TorchLoader":  # imports torch: only when asked for
        from ._torch import TorchLoader
        return TorchLoader
    raise AttributeError(f"module 'headrace.ray' has no attribute {name!r}")
