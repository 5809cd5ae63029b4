"""Whole-system runs on a local cluster: a trace of emulated jobs, the service (or Slurm
alone), and the metrics next to the simulator's for the same trace."""
