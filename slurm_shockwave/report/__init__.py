"""Rendering results for people: rich tables, CSV, matplotlib plots."""
