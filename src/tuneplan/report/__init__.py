"""Rendering: rich tables for the terminal and matplotlib plots. No physics here."""
