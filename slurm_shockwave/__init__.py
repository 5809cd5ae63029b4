"""slurm-shockwave: fair and efficient GPU scheduling for adaptive ML jobs on Slurm."""

__version__ = "0.1.0"
