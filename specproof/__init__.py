"""specproof, the application: the command line, the regression gate and the report writers, built on the core
(:mod:`simulator`) and the exact engine (:mod:`exact`)."""
