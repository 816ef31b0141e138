"""What the planner can optimise for, declared once (the CLI, the web API and `plan` read it here)."""

OBJECTIVES = ("cheapest", "fastest", "energy", "balanced")
"""cheapest: lowest cost meeting the constraints; fastest: shortest wall clock; energy: fewest kWh;
balanced: smallest time x cost (the Pareto front's knee)."""
COST_OBJECTIVES = ("cheapest", "balanced")
"""Objectives that need a price for every candidate they rank."""
