"""Scheduling policies: pure functions of a ClusterView and explicit memory."""
