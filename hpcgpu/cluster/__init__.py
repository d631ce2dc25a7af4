"""Cluster mode: Dask on a batch scheduler from a notebook, one worker per GPU.

``SLURMCluster(gpus_per_node=4, ...)``, ``cluster.scale(gpus=8)``, ``cluster.adapt(...)``;
see docs/cluster.md.
"""

from __future__ import annotations

from hpcgpu.cluster.cluster import GPUCluster
from hpcgpu.cluster.job import GPUJob
from hpcgpu.cluster.jobs import JobInfo
from hpcgpu.cluster.schedulers import LSFCluster, PBSCluster, SGECluster, SLURMCluster

__all__ = ["GPUCluster", "GPUJob", "JobInfo", "SLURMCluster", "PBSCluster", "LSFCluster",
           "SGECluster"]
