"""The job side: what a training script imports to report to the service.

Standard library only, and nothing else of slurm_shockwave (an import contract keeps it
so): ``reporter.py`` may be copied into a training image on its own.
"""
