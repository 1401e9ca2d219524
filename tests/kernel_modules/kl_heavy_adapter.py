"""The chain adapter, with a ``before_kernel_import`` hook that stubs the serving engine kl_heavy imports
(tests/test_kernel_loading.py)."""

from __future__ import annotations

import sys
import types

from simulator.kernels.adapters import chain as adapter  # the adapter, as built in

__all__ = ["adapter", "before_kernel_import"]


def before_kernel_import() -> None:
    """``kl_serving_engine.platforms.current_platform.device_type == "cpu"``, without the engine."""
    engine, platforms = types.ModuleType("kl_serving_engine"), types.ModuleType("kl_serving_engine.platforms")
    platforms.current_platform = types.SimpleNamespace(device_type="cpu")
    engine.platforms = platforms
    sys.modules.setdefault("kl_serving_engine", engine)
    sys.modules.setdefault("kl_serving_engine.platforms", platforms)
