"""Emulated training jobs: sleep through each epoch as the simulator's profile says.

``python -m slurm_shockwave.emulate`` is a stand-in for a real training script on a Slurm
cluster (docs/emulation.md): it follows its adaptation mode's batch sizes epoch by epoch,
reports progress, checkpoints on its signal and resumes after a requeue.
"""
