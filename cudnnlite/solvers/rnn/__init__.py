"""Recurrent-network solvers: standard (per-step GEMM + fused cell) and persistent."""
