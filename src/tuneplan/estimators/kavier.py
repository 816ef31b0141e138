"""The Kavier seed's step-time model, term by term, with its published default constants.

  T_s = G_a (T_f + T_b) + T_o + T_c
  T_f = 2 P B S / (F E) + O_t,   E = E_b E_g min(1, a1 log2 B + a2),   T_b = 2 T_f
  T_o = 20 P_t / B_m,            P_t = P_all (full) or 2 r d k L (LoRA family; r = 8, k = 4)
  T_c = 0 (G = 1) | c_c T_r(G, W_n) (N = 1) | c_c (T_r(G_n, W_n) + T_r(N, W_i)) (N > 1)
  T_r(p, W) = l log2 p + o (p - 1) + D (p - 1) / (p W / 8),   D = 4 P_t bytes
  T   = G_a B S G / (m_g T_s) x c_m c_o c_i     (tokens/s, all GPUs)

Uncalibrated, every calibration scale (E_g, c_c, m_g, c_m, c_o, c_i) is 1.0 and O_t = 0 (Kavier's
shipped calibration has training_overhead_s = 0). `fit` is the seed's two-tier calibration: global
scales by Powell with an L2 pull toward 1 (its weight chosen on a 70/30 validation split), then per
(model, method, GPU, count) median ratios.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import resources

import numpy as np

from tuneplan.estimators.tuneplan_physics import BorrowsMemory
from tuneplan.physics.codes import OTHER_PEFT_CODES, lora_family

Arrays = dict[str, np.ndarray]

A1 = 0.0341
"""MFU curve slope in log2(micro-batch) (Kavier's published a1)."""
A2 = 0.8147
"""MFU curve intercept (Kavier's published a2)."""
HOP_LATENCY_S = 5e-6
"""Ring all-reduce per-hop latency l (s)."""
MESSAGE_OVERHEAD_S = 2e-6
"""Ring all-reduce per-message overhead o (s)."""
INFINIBAND_GBPS = 200.0
"""Inter-node rate W_i (Gbit/s)."""
ADAMW_BYTES_PER_PARAM = 20.0
"""Optimizer memory traffic per trainable parameter (bytes)."""
LORA_RANK = 8
LORA_TARGETS_PER_LAYER = 4
L2_WEIGHTS = (0.0, 0.001, 0.01, 0.1, 1.0)
"""Candidate weights of the tier-1 scales' pull toward 1, chosen on a validation split."""
SCALE_GROUPS = ("gpu", "method", "model", "count")


@lru_cache(maxsize=1)
def kavier_gpu_factors() -> dict:
    import yaml

    text = resources.files("tuneplan.data").joinpath("kavier_gpus.yaml").read_text(encoding="utf-8")
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader


@dataclass
class KavierScales:
    """Kavier's calibration scales (all 1.0 uncalibrated)."""

    gpu: dict[str, float] = field(default_factory=dict)  # E_g per GPU name
    method: dict[str, float] = field(default_factory=dict)  # c_m
    model: dict[str, float] = field(default_factory=dict)  # c_o
    gpu_count: dict[str, float] = field(default_factory=dict)  # m_g by str(G)
    comm: float = 1.0  # c_c
    interaction: dict[str, float] = field(default_factory=dict)  # c_i by "model|method|gpu|G"
    overhead_s: float = 0.0  # O_t

    @classmethod
    def from_payload(cls, d: dict) -> KavierScales:
        return cls(gpu=dict(d["gpu"]), method=dict(d["method"]), model=dict(d["model"]),
                   gpu_count=dict(d["gpu_count"]), comm=float(d["comm"]),
                   interaction=dict(d["interaction"]), overhead_s=float(d.get("overhead_s", 0)))


class KavierEstimator(BorrowsMemory):
    """Kavier's model; `fit(X, y)` calibrates its per-name scales on measured throughput (X the rows'
    `build_arrays` with their GPU, method and model names, y tokens/s). Fitted: `scales_`, `l2_weight_`."""

    name = "kavier"

    def __init__(self, scales: KavierScales | None = None, calibration_name: str | None = None) -> None:
        self.scales_ = scales or KavierScales()
        self.calibration_name = calibration_name

    @classmethod
    def from_payload(cls, d: dict, name: str | None = None) -> KavierEstimator:
        """The estimator a calibration payload describes (`payload()`)."""
        est = cls(KavierScales.from_payload(d), calibration_name=name)
        est.l2_weight_ = d.get("l2_weight")
        return est

    def payload(self) -> dict:
        return {**asdict(self.scales_), "l2_weight": self.l2_weight_}

    def fit(self, X: Arrays, y: np.ndarray) -> KavierEstimator:
        from tuneplan.estimators.residual_fit import MIN_ROWS, NotEnoughData

        n = len(y)
        if n < MIN_ROWS:
            raise NotEnoughData(f"kavier learner: {n} throughput rows; at least {MIN_ROWS} needed")
        base = KavierEstimator().time_arrays(X)
        parts = {"tf3": base["forward_s"] + base["backward_s"], "to": base["optimizer_s"],
                 "tc": base["communication_s"], "tokens": base["tokens_per_step"]}
        keys = {"gpu": list(X["_gpu_names"]), "method": list(X["_methods"]), "model": list(X["_model_names"]),
                "count": [str(int(g)) for g in X["gpus"]]}

        def rows(idx):
            return {k: v[idx] for k, v in parts.items()}, {k: [v[i] for i in idx] for k, v in keys.items()}

        # choose the L2 weight on a 70/30 validation split (the seed's 70% training share)
        perm = np.random.default_rng(0).permutation(n)
        tr, va = perm[: int(0.7 * n)], perm[int(0.7 * n):]
        best = (float("inf"), L2_WEIGHTS[0])
        if len(va) >= 3:
            for lam in L2_WEIGHTS:
                pred = _tier1_predict(_tier1(*rows(tr), y[tr], lam), *rows(va))
                err = float(np.median(np.abs(pred / y[va] - 1)))
                if err < best[0]:
                    best = (err, lam)
        self.l2_weight_ = best[1]
        sc = _tier1(parts, keys, y, self.l2_weight_)
        # tier 2: per (model, method, GPU, count) median of measured / tier-1 prediction
        import pandas as pd

        cell = ["|".join(k) for k in zip(keys["model"], keys["method"], keys["gpu"], keys["count"], strict=True)]
        ratio = pd.Series(y / _tier1_predict(sc, parts, keys))
        sc.interaction = {k: float(v) for k, v in ratio.groupby(cell, sort=False).median().items()}
        self.scales_ = sc
        return self

    @staticmethod
    def gpu_factors(a: Arrays) -> tuple[np.ndarray, np.ndarray]:
        """(E_b, F in FLOP/s) per row: Kavier's factor for the GPU named in `_gpu_names` and the peak
        it was fitted against; GPUs outside its library get its default factor and the catalog peak."""
        table = kavier_gpu_factors()
        peak = np.asarray(a["peak_flops"], dtype=float)
        eb = np.full(peak.shape, float(table["default_mfu_factor"]))
        names = a.get("_gpu_names")
        if names is None:
            return eb, peak
        f = peak.copy()
        names = np.asarray(names)
        for name in set(names.tolist()):
            entry = table["gpus"].get(name)
            if entry is not None:
                row = names == name
                eb[row] = float(entry["mfu_factor"])
                f[row] = float(entry["kavier_peak_tflops"]) * 1e12
        return eb, f

    def time_arrays(self, a: Arrays) -> Arrays:
        """Kavier's step-time model, term by term (its memory comes from `BorrowsMemory`)."""
        B, S, Ga = a["micro_batch"], a["seq_len"], a["grad_accum"]
        G, N = a["gpus"], a["nodes"]
        P = a["params_active"]
        names = a.get("_gpu_names")
        eb, F = self.gpu_factors(a)
        eg = np.ones_like(B)
        if names is not None and self.scales_.gpu:
            eg = np.array([self.scales_.gpu.get(n, 1.0) for n in names])
        E = eb * eg * np.minimum(1.0, A1 * np.log2(B) + A2)
        Tf = 2.0 * P * B * S / (F * E) + self.scales_.overhead_s
        Tb = 2.0 * Tf
        lora = lora_family(a["method_code"])
        Pt = np.where(lora, 2.0 * LORA_RANK * a["hidden"] * LORA_TARGETS_PER_LAYER * a["n_layers"],
                      a["params_total"])
        # the other PEFT methods (physics/peft_methods.py, codes >= 7): the seed has no term; their own count
        Pt = np.where(a["method_code"] >= OTHER_PEFT_CODES, a.get("params_trainable", Pt), Pt)
        To = ADAMW_BYTES_PER_PARAM * Pt / a["mem_bw"]
        D = 4.0 * Pt
        Wn = a.get("kavier_wn_gbps", a["intra_bw"] * 2.0 * 8.0 / 1e9)  # bidirectional GB/s -> Gbit/s

        def ring(p, w_gbps):
            p = np.maximum(p, 1.0)
            return HOP_LATENCY_S * np.log2(p) + MESSAGE_OVERHEAD_S * (p - 1.0) + D * (p - 1.0) / (
                p * w_gbps * 1e9 / 8.0)

        Gn = np.maximum(1.0, np.floor(G / N))
        cc = self.scales_.comm
        Tc = np.where(G <= 1, 0.0, np.where(N <= 1, cc * ring(G, Wn), cc * (ring(Gn, Wn) + ring(N, INFINIBAND_GBPS))))
        Ts = Ga * (Tf + Tb) + To + Tc
        sc = self.scales_
        scale = np.ones_like(B)
        if sc.method or sc.model or sc.gpu_count or sc.interaction:
            methods, models = a.get("_methods"), a.get("_model_names")

            def lookup(table: dict, keys) -> np.ndarray | float:
                return 1.0 if keys is None else np.array([table.get(str(k), 1.0) for k in keys])

            scale = lookup(sc.method, methods) * lookup(sc.model, models) / lookup(sc.gpu_count, G.astype(int))
            if models is not None and methods is not None and names is not None:
                scale = scale * lookup(sc.interaction, [f"{mo}|{me}|{na}|{int(g)}" for mo, me, na, g in zip(
                    models, methods, names, G, strict=True)])
        tokens = Ga * B * S * G
        thr = tokens / Ts * scale
        step = tokens / thr
        return {"step_s": step, "forward_s": Ga * Tf, "backward_s": Ga * Tb, "optimizer_s": To, "communication_s": Tc,
                "compute_s": Ga * (Tf + Tb), "tokens_per_step": tokens, "model_flops_per_step": 6.0 * P * tokens,
                "efficiency": E}

    def assumptions(self, job=None) -> list[str]:
        return [
            "Kavier's model: T_s = G_a (T_f + T_b) + T_o + T_c; forward 2PBS/(F E) with E = E_b min(1, "
            f"{A1} log2 B + {A2}); backward = 2 x forward.",
            f"AdamW moves {ADAMW_BYTES_PER_PARAM:g} bytes per trainable parameter; LoRA-family trainable "
            f"parameters = 2 r d k L with r = {LORA_RANK}, k = {LORA_TARGETS_PER_LAYER}.",
            f"Ring all-reduce: {HOP_LATENCY_S * 1e6:g} us per hop, {MESSAGE_OVERHEAD_S * 1e6:g} us per message, "
            f"intra-node link rate, then InfiniBand {INFINIBAND_GBPS:g} Gb/s across nodes.",
            "Per-GPU MFU factors E_b from Kavier's GPU library (0.42 for GPUs it does not list).",
            "No memory model (memory figures come from tuneplan's memory model)."
            if not self.calibration_name else f"Calibration scales from '{self.calibration_name}'.",
            self.MEMORY_ASSUMPTION,
        ]


def _tier1(parts: Arrays, keys: dict, y: np.ndarray, lam: float) -> KavierScales:
    """Tier 1: one scale per GPU, method, model and GPU count, and the communication scale, fitted by
    Powell on the mean squared log error plus `lam` times the squared log scales."""
    from scipy.optimize import minimize

    values = {g: sorted(set(keys[g])) for g in SCALE_GROUPS}
    index = {g: np.array([values[g].index(v) for v in keys[g]]) for g in SCALE_GROUPS}
    offs = np.cumsum([0] + [len(values[g]) for g in SCALE_GROUPS])
    ly = np.log(np.maximum(y, 1e-30))

    def scales(x) -> KavierScales:
        s = np.exp(x)
        sc = KavierScales(comm=float(s[-1]))
        for g, o, field_ in zip(SCALE_GROUPS, offs, (sc.gpu, sc.method, sc.model, sc.gpu_count), strict=False):
            field_.update({v: float(s[o + i]) for i, v in enumerate(values[g])})
        return sc

    def loss(x):
        s = np.exp(x)
        pred = _throughput(parts, *(s[o + index[g]] for g, o in zip(SCALE_GROUPS, offs, strict=False)), s[-1])
        return float(np.mean((np.log(np.maximum(pred, 1e-30)) - ly) ** 2) + lam * np.sum(x**2))

    res = minimize(loss, np.zeros(offs[-1] + 1), method="Powell",
                   options={"maxiter": 20000, "xtol": 1e-4, "ftol": 1e-8})
    return scales(res.x)


def _throughput(parts: Arrays, eg, cm, co, mg, comm) -> np.ndarray:
    """Tier 1's throughput: the uncalibrated terms under the GPU, method, model, count and communication scales."""
    return parts["tokens"] / (mg * (parts["tf3"] / eg + parts["to"] + comm * parts["tc"])) * cm * co


def _tier1_predict(sc: KavierScales, parts: Arrays, keys: dict) -> np.ndarray:
    tables = (sc.gpu, sc.method, sc.model, sc.gpu_count)
    eg, cm, co, mg = (np.array([t.get(v, 1.0) for v in keys[g]]) for t, g in zip(tables, SCALE_GROUPS, strict=True))
    return _throughput(parts, eg, cm, co, mg, sc.comm)
