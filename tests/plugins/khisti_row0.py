"""The negative control of Khisti et al.'s rule (``khisti-is``, tests/test_khisti.py) as a plugin that ``specproof
prove`` and a reproducer can name: ``tests.plugins.khisti_row0:khisti_row0``. The same importance-sampling
selection, then SpS against draft model 0's row instead of the selected token's law: lossy under ``k-models``
drafting whenever the draft models differ."""

from __future__ import annotations

from simulator.numeric import ratio, residual
from simulator.verifiers.multidraft import canonical, lift, selection_of


def row0_step(tokens, rows, q, rng):
    """The control's step: the rule's selection, then SpS against ``rows[0]``."""
    index = rng.categorical(selection_of(canonical(tuple(q), *rows), tokens))
    if rng.bernoulli(ratio(q[tokens[index]], rows[0][tokens[index]])):
        return index, None
    return None, rng.categorical(residual(q, rows[0]))


khisti_row0 = lift(row0_step)
khisti_row0.__name__ = khisti_row0.__qualname__ = "khisti_row0"
khisti_row0.schemes = ("k-models",)
