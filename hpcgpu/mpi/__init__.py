"""MPI bootstrap: ``hpcgpu.mpi.initialize()`` and ``mpirun -n N python -m hpcgpu.mpi script.py``.

See :mod:`hpcgpu.mpi.core`. mpi4py is imported only when :func:`initialize` runs.
"""

from hpcgpu.mpi.core import initialize, node_placement, shutdown

__all__ = ["initialize", "shutdown", "node_placement"]
