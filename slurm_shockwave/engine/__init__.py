"""One round of scheduling: observe -> admit -> plan -> place -> diff -> apply -> report."""
