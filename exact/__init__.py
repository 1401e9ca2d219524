"""specproof exact engine: enumeration of every draft tree and random choice, output laws, certificates, exact
recursions (:mod:`exact.recursions`) and the symbolic prover (:mod:`exact.prove`)."""

from simulator.usercode import register_own_package

from .certificate import FLOAT_TOLERANCE, Certificate, certify, fixed_tree_law, round_law
from .law import Counterexample, OutputLaw

register_own_package(__name__, __file__)  # the exact engine's frames are not user code

__all__ = ["FLOAT_TOLERANCE", "Certificate", "Counterexample", "OutputLaw", "certify", "fixed_tree_law",
           "round_law"]
