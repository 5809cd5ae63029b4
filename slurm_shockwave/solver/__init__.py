"""Numerical optimisation: closed-form fractional allocations now, the MILP later."""
