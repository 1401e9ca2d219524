"""The regression gate: batteries of certificates, hunting, shrinking, the pytest helpers and the mutation zoo
(docs/gate.md)."""

from pathlib import Path

from simulator.usercode import register_specimens

#: the torch kernels and generation loops the gate ships as specimens (the mutation zoo's and the kernel report's,
#: installed with the package so that ``zoo`` runs anywhere): user code all the same, for messages, precision and
#: coverage
register_specimens(*(str(Path(__file__).resolve().parent / name)
                     for name in ("mutants.py", "torch_kernels.py", "triton_kernels.py", "loop_specimens.py")))
