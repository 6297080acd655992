"""The example's SFT workload on one GPU against two (DDP)."""
