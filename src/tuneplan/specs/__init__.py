"""Specs: what a model, a GPU and a job are (validated, immutable, units in the names)."""
