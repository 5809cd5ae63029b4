"""The Shockwave planner: a dynamic Fisher market solved over a window of future rounds."""
