"""The ML workloads: model catalogue, batch-size adaptation patterns, per-epoch profiles."""
