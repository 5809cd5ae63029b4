"""Typed domain objects shared by every driver: jobs, cluster view, plans, errors."""
