"""The trace-driven simulator: trace formats, adaptation emulation, simulated world, loop."""
