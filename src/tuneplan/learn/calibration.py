"""Calibration files: versioned JSON of fitted constants, scales and residual models."""

from __future__ import annotations


def interval_residuals(estimator: str, calibration=None):
    """Held-out log-ratios stored for an estimator in the calibration (or the shipped default)."""
    return None
