"""Evaluation metrics exactly as the Shockwave paper defines them
(../shared/reference/shockwave/NOTES.md §5)."""
