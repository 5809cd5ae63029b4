"""Predicting a job's future: batch-size regimes and remaining runtime (Shockwave §4)."""
