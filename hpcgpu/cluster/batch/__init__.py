"""Batch clusters: ``SLURMCluster`` and the others, one worker per GPU in batch jobs.

The scheduler classes (:mod:`~hpcgpu.cluster.batch.schedulers`) on one base
(:mod:`~hpcgpu.cluster.batch.base`) holding its parts: the job fleet with its pools and arrays,
the submitter, the job monitor and the walltime planner; the scaling policy and adaptivity;
the checks of the keyword arguments before anything starts (:mod:`~hpcgpu.cluster.batch.setup`).
Users import the classes from :mod:`hpcgpu` or :mod:`hpcgpu.cluster`.
"""
