"""Choosing a solver for a problem: registry, heuristics, tuning DB, tuner, plans."""
