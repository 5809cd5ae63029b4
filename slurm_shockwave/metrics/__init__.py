"""Evaluation metrics exactly as the Shockwave paper defines them (NOTES.md §5)."""
