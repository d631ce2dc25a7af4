"""Grid Engine's queue query, kept under this name: it lives in :mod:`hpcgpu.schedulers.sge.queues`."""

from hpcgpu.schedulers.sge import queues as _moved

globals().update({k: v for k, v in vars(_moved).items() if not k.startswith("__")})
__all__ = list(_moved.__all__)
