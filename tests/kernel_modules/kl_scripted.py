"""A kernel whose token draws go through a ``@torch.jit.script`` helper, as vLLM's rejection sampler's do
(tests/test_kernel_loading.py); chain convention. ``sps`` is LOSSLESS, ``sps_target_residual`` LOSSY (the token
after a rejection drawn from the target row)."""

from __future__ import annotations

import torch

import kl_classes

race = torch.jit.script(kl_classes.race)
sps, sps_target_residual = kl_classes.chain_kernels(race)
