"""A fused task's steps: Python objects until the task is first pickled, then the bytes sent.

distributed's scheduler keeps the last ``distributed.admin.low-level-log-length`` (1,000)
batches it sent to each worker, and a batch holds its tasks. A fused task of the seed
array-sum holds about 600 garbage-collected objects (its block steps, their tasks and
tuples), so each ``compute()`` left about 24,000 of them behind in the process that runs the
scheduler (the user's own, in every mode), and every full garbage collection there walked
them all, longer after each compute. Kept as the bytes that were sent, a task is one
object the collector does not track. On the worker the steps are unpickled where the task
runs, not on its event loop.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import pickle

import cloudpickle

__all__ = ["PackedSteps", "gc_paused"]


class PackedSteps:
    """The steps of one fused task (:func:`hpcgpu.array.optimization.fuse_generated_trees`).

    Examples
    --------
    >>> packed = PackedSteps((1, "two", [3]))
    >>> packed.steps()
    (1, 'two', [3])
    >>> sent = pickle.loads(pickle.dumps(packed))
    >>> sent.steps(), packed.steps()  # both now unpickle the bytes that were sent
    ((1, 'two', [3]), (1, 'two', [3]))
    """

    __slots__ = ("_steps", "_blob")

    def __init__(self, steps: tuple):
        self._steps: tuple | None = steps
        self._blob: bytes | None = None

    def steps(self) -> tuple:
        """The steps: the objects, or a new copy of them from the bytes once pickled (not
        kept: keeping them would hold the objects this class exists to drop)."""
        steps = self._steps
        return pickle.loads(self._blob) if steps is None else steps

    def blob(self) -> bytes:
        """The pickled steps, made once; the objects are dropped then."""
        if self._blob is None:
            try:
                self._blob = pickle.dumps(self._steps, protocol=5)
            except (pickle.PicklingError, AttributeError, TypeError):  # a lambda or a local function
                self._blob = cloudpickle.dumps(self._steps, protocol=5)
            self._steps = None
        return self._blob

    def __reduce__(self):
        return _from_blob, (self.blob(),)

    def __dask_tokenize__(self):
        return "hpcgpu-packed-steps", hashlib.sha1(self.blob()).hexdigest()


def _from_blob(blob: bytes) -> PackedSteps:
    packed = PackedSteps.__new__(PackedSteps)
    packed._steps, packed._blob = None, blob
    return packed


@contextlib.contextmanager
def gc_paused():
    """No cyclic garbage collection while the graph is built: it allocates tens of
    thousands of objects that all stay alive, and in a scheduler's large heap each full
    collection it triggers walks everything (on the VM, in a LocalGPUCluster: 240-340 ms
    of materialisation with collections, 105-160 ms without)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
