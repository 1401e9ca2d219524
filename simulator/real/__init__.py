"""Real causal-LM pairs: loading and serving them (KV-cached rounds, Spec-Bench), the exact cross-check on their
rows, training a draft for a target, and fetching models and questions (docs/torch-path.md)."""
