"""specproof, the application: the command line, the regression gate and the report writers, built on the core
(:mod:`simulator`) and the exact engine (:mod:`exact`)."""

from simulator.usercode import register_own_package

register_own_package(__name__, __file__)  # the application's frames are not user code
