"""specproof simulator: model pairs, draft trees, drafting schemes, verifiers, and the sampling engines.

The exact engine lives in the sibling package ``exact``; both run the same rule implementations.
"""

__version__ = "0.1.0"
