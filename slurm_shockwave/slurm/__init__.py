"""Slurm at the edge: hints, the backend protocol, its CLI and pyslurm backends, the world."""
