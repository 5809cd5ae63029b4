from slurm_shockwave.cli.main import cli

cli()
