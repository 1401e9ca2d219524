"""The torch and real-model path: batched verification of given rows (the rules' array rules), capture and
certification of torch kernels nobody here wrote, causal-LM pairs and Spec-Bench."""
