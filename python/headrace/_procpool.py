"""Python operators in worker processes, exchanging samples through shared memory.

For a per-sample function that holds the GIL for long (pure-Python pixel loops, a
library that does not release it), running it on the engine's threads serializes them
on the GIL. ``headrace.ops.map(fn, outputs, processes=N)`` runs it in N worker
processes instead. An engine thread that reaches the op takes an idle worker, copies the
sample's current image into that worker's shared-memory block (one memcpy, no pickling
of pixels), sends the small metadata (index, id, turns, image shape) over a pipe, and
waits for the reply with the GIL released. The worker calls ``fn`` on a numpy view of
the shared block and writes the outputs into its shared output block; the engine thread
reads them from there into the batch row.

Cost per sample: two pipe messages of metadata (~50-100 µs) plus the image copy into
shared memory; in exchange, N functions run truly in parallel.
"""
from __future__ import annotations

import multiprocessing as mp
import queue
import threading
import traceback
import weakref
from multiprocessing import shared_memory
from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np

_NP = {"u8": np.uint8, "i32": np.int32, "i64": np.int64, "f16": np.float16, "f32": np.float32}


def _layout(outputs) -> Tuple[List[Tuple[str, Any, Tuple[int, ...], int]], int]:
    fields, offset = [], 0
    for name, dtype, shape in outputs:
        dt = np.dtype(_NP[dtype])
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        fields.append((name, dt, tuple(shape), offset))
        offset += (nbytes + 63) // 64 * 64
    return fields, max(offset, 64)


def _worker_main(conn, fn, outputs, out_name) -> None:
    fields, _ = _layout(outputs)
    out = shared_memory.SharedMemory(name=out_name)
    inputs: Dict[str, shared_memory.SharedMemory] = {}
    try:
        while True:
            msg = conn.recv()
            if msg is None:
                break
            sample = msg
            try:
                shape = sample.pop("image_shape", None)
                in_name = sample.pop("image_shm", None)
                if shape is not None:
                    if in_name not in inputs:
                        for old in inputs.values():
                            old.close()
                        inputs = {in_name: shared_memory.SharedMemory(name=in_name)}
                    image = np.ndarray(shape, np.uint8, buffer=inputs[in_name].buf)
                    image.flags.writeable = False
                    sample["image"] = image
                result = fn(sample)
                for name, dt, fshape, offset in fields:
                    view = np.ndarray(fshape, dt, buffer=out.buf, offset=offset)
                    view[...] = np.asarray(result[name], dtype=dt).reshape(fshape)
                del sample, result
                conn.send(None)
            except BaseException:  # noqa: BLE001 - sent back to the engine thread
                conn.send(traceback.format_exc())
    finally:
        for shm in inputs.values():
            shm.close()
        out.close()


class _Worker:
    def __init__(self, ctx, fn, outputs, out_bytes: int):
        self.out = shared_memory.SharedMemory(create=True, size=out_bytes)
        self.image = None  # created on demand, grown when an image does not fit
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, fn, outputs, self.out.name),
                                   daemon=True)
        self.process.start()
        child.close()

    def image_block(self, nbytes: int) -> shared_memory.SharedMemory:
        if self.image is None or self.image.size < nbytes:
            if self.image is not None:
                self.image.close()
                self.image.unlink()
            self.image = shared_memory.SharedMemory(create=True, size=max(nbytes, 1 << 20))
        return self.image

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (OSError, ValueError):
            pass
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()
        for shm in (self.out, self.image):
            if shm is not None:
                shm.close()
                shm.unlink()


class ProcessMap:
    """A callable for the engine's threads that runs ``fn`` in a process pool (lazily
    started at the first sample, stopped when the pipeline's spec is released)."""

    def __init__(self, fn: Callable, outputs: Sequence[Tuple[str, str, Tuple[int, ...]]],
                 processes: int):
        self.fn = fn
        self.outputs = tuple(outputs)
        self.processes = processes
        self._fields, self._out_bytes = _layout(self.outputs)
        self._lock = threading.Lock()
        self._idle: "queue.Queue[_Worker]" = queue.Queue()
        self._workers: List[_Worker] = []
        self._finalizer = None

    def _start(self) -> None:
        ctx = mp.get_context("spawn")  # never fork a process whose engine threads run
        for _ in range(self.processes):
            w = _Worker(ctx, self.fn, self.outputs, self._out_bytes)
            self._workers.append(w)
            self._idle.put(w)
        self._finalizer = weakref.finalize(self, ProcessMap._stop_all, list(self._workers))

    @staticmethod
    def _stop_all(workers: List[_Worker]) -> None:
        for w in workers:
            w.stop()

    def __call__(self, sample: Dict[str, Any]) -> Dict[str, np.ndarray]:
        with self._lock:
            if not self._workers:
                self._start()
        worker = self._idle.get()
        try:
            image = sample.pop("image", None)
            if image is not None:
                block = worker.image_block(image.nbytes)
                np.ndarray(image.shape, np.uint8, buffer=block.buf)[...] = image
                sample["image_shape"] = image.shape
                sample["image_shm"] = block.name
            worker.conn.send(sample)
            error = worker.conn.recv()  # blocks with the GIL released
            if error is not None:
                raise RuntimeError(f"in worker process {worker.process.pid}:\n{error}")
            return {name: np.ndarray(shape, dt, buffer=worker.out.buf, offset=offset).copy()
                    for name, dt, shape, offset in self._fields}
        finally:
            self._idle.put(worker)

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()

    def __reduce__(self):
        raise TypeError("a ProcessMap is not picklable")
