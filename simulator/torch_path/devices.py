"""Where torch work may run: a device string checked once, up front, so a bad one is an error naming the field
rather than a failure deep inside a kernel or a model's forward pass."""

from __future__ import annotations

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
