"""The lossy-by-design rules serving engines ship (docs/lossy.md): each written once against the randomness
interface from the shipped code it follows, as ``make(**knobs) -> verifier`` with its ``KNOBS``."""
