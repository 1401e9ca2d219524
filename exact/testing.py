"""A compatibility alias: the pytest helpers of :mod:`specproof.gate.testing` under the import path
``exact.testing`` (listed in the architecture test)."""

from specproof.gate.testing import assert_acceptance, assert_lossless, assert_lossy  # noqa: F401
