"""A stack adapter: what a user's first few runs on a new stack (machine, framework, data) teach on top
of a calibration fitted elsewhere. An overall throughput scale, per-method and per model-and-method scales
relative to it, and a memory offset — as many of them as the runs support (`tuneplan.learn.adapt` fits them). Applying one
needs no fitting code (numpy arrays); it is stored in a calibration file's payload under "stack"."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np


@dataclass
class StackAdapter:
    throughput_log_scale: float = 0.0
    """log(measured / predicted) throughput over the stack's runs: every configuration scaled by it."""
    method_log_scales: dict[str, float] = field(default_factory=dict)
    """Per PEFT method, log-scale on top of the overall one (methods the runs measured often enough)."""
    memory_offset_gib: float = 0.0
    """GiB added to the allocated memory of every configuration (a framework's buffers, a context)."""
    fitted: list[str] = field(default_factory=list)
    """What the runs supported, in words (said in the estimate's assumptions)."""
    n_rows: dict[str, int] = field(default_factory=dict)
    config_log_scales: dict[str, float] = field(default_factory=dict)
    """Per model and method measured (`config_key`), log-scale on top of the overall and method ones."""

    def throughput_factor(self, a: dict, n: int) -> np.ndarray:
        """Multiplier on throughput for each configuration of the arrays."""
        log_f = np.full(n, self.throughput_log_scale)
        methods = a.get("_methods")
        if self.method_log_scales and methods is not None and len(methods) == n:
            log_f = log_f + np.asarray([self.method_log_scales.get(str(m), 0.0) for m in methods], dtype=float)
        models = a.get("_model_names")
        if self.config_log_scales and methods is not None and models is not None and len(models) == n:
            log_f = log_f + np.asarray([self.config_log_scales.get(config_key(m, me), 0.0)
                                        for m, me in zip(models, methods, strict=True)], dtype=float)
        return np.exp(log_f)

    def describe(self) -> str:
        return "; ".join(self.fitted) if self.fitted else "nothing fitted"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> StackAdapter:
        return cls(float(d.get("throughput_log_scale", 0.0)),
                   {str(k): float(v) for k, v in (d.get("method_log_scales") or {}).items()},
                   float(d.get("memory_offset_gib", 0.0)), [str(x) for x in d.get("fitted") or []],
                   {str(k): int(v) for k, v in (d.get("n_rows") or {}).items()},
                   {str(k): float(v) for k, v in (d.get("config_log_scales") or {}).items()})


def config_key(model: str, method: str) -> str:
    """A configuration's group in a stack adapter and in a calibration's stored residuals: model and method."""
    return f"{model}|{method}"
