"""Optimizer-state offload: fused AdamW on the GPU, CPU AdamW, and the per-layer stepper."""
