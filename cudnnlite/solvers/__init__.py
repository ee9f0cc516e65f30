"""Solvers: one stateless class per algorithm (see base.py and DESIGN.md section 3)."""
