"""The pytest helpers' earlier import path: :mod:`specproof.gate.testing` re-exported (a compatibility alias,
listed in the architecture test)."""

from specproof.gate.testing import assert_acceptance, assert_lossless, assert_lossy  # noqa: F401
