"""Verification rules: single-step rules, their lifts to trees, block verifiers and negative controls."""

from .registry import VERIFIERS, VerifierSpec, load_verifier

__all__ = ["VERIFIERS", "VerifierSpec", "load_verifier"]
