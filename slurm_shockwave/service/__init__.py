"""The long-running scheduler service: the round loop, its store, lock and heartbeat."""
