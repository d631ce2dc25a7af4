"""Launchers, kept under this name: they live in :mod:`hpcgpu.launchers`, one class each."""

from hpcgpu.launchers import LAUNCHERS, LOCAL_RANK_VARIABLES, RANK_VARIABLES, Launcher, get_launcher

__all__ = ["Launcher", "LAUNCHERS", "get_launcher", "LOCAL_RANK_VARIABLES", "RANK_VARIABLES"]
