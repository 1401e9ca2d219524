"""Where torch work may run: a device string checked once, up front, so a bad one is an error naming the field
rather than a failure deep inside a kernel or a model's forward pass."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from simulator.errors import InvalidParameterError

if TYPE_CHECKING:  # torch is optional: imported where a device is asked for
    import torch


def usable_device(device: str, field: str = "device") -> "torch.device":
    """``device`` (``cpu``, ``cuda``, ``cuda:1``) as a ``torch.device`` once torch has placed a tensor there.
    Torch missing, an unknown device string and a device this machine lacks (torch asserts when CUDA is absent)
    each raise :class:`InvalidParameterError` on ``field``."""
    try:
        import torch
    except ImportError:
        raise InvalidParameterError(field, "running on a device needs torch (pip install 'specproof[torch]')") \
            from None
    try:
        return torch.zeros(1, device=device).device
    except (RuntimeError, AssertionError) as err:
        raise InvalidParameterError(field, f"torch cannot use device {device!r}: {err}") from None


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform tells it, else the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this platform
        return os.cpu_count() or 1


def set_torch_threads(workers: int = 1) -> int:
    """Set torch's intra-op threads on the CPU to this process's share of the cores, ``workers`` processes sharing
    them (one each when the workers fill the cores), instead of inheriting torch's default of every core in every
    process, whose threads then spin against each other. Returns the count set."""
    import torch

    threads = max(1, usable_cores() // max(1, workers))
    torch.set_num_threads(threads)
    return threads
