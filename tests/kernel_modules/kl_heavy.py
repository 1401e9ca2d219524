"""A kernel whose module imports a serving engine that is not installed (tests/test_kernel_loading.py): importable
only once an adapter's ``before_kernel_import`` has put a stub in its place."""

from __future__ import annotations

import kl_serving_engine.platforms  # not installed: stubbed by kl_heavy_adapter
from kl_classes import speculative


def sps(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """Speculative sampling on the device the engine names (``cpu`` from the stub): LOSSLESS."""
    device = kl_serving_engine.platforms.current_platform.device_type
    return speculative(candidate_input_ids.to(device), candidate_logits, candidate_length, new_logits)
