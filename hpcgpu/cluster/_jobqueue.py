"""dask-jobqueue's ``Job`` and ``JobQueueCluster``, imported without touching the home directory.

Importing ``dask_jobqueue`` runs ``dask.config.ensure_file``, which copies its
``jobqueue.yaml`` into ``~/.config/dask``. hpcgpu promises to write nothing in the user's
home, so the copy is skipped while importing (the defaults are registered all the same).
"""

from __future__ import annotations

import sys
from unittest import mock

import dask.config

__all__ = ["Job", "JobQueueCluster"]

if "dask_jobqueue" not in sys.modules:
    with mock.patch.object(dask.config, "ensure_file", lambda *args, **kwargs: None):
        import dask_jobqueue  # noqa: F401

from dask_jobqueue.core import Job, JobQueueCluster  # noqa: E402
