"""tuneplan against its peers, side by side on the same measured rows.

    python benchmarks/peers.py --peers-python /tmp/peers-venv/bin/python
    python benchmarks/peers.py --peers-python /tmp/peers-venv/bin/python --out /tmp/peers.json

Peers (installed in a separate virtual environment, never a tuneplan dependency; see docs/peers.md):

- kavier (PyPI): the Kavier step-time model with its shipped calibration (fitted on IBM's
  LLMFineTuningBench, where the `llmftbench` reference rows come from: in-sample for kavier there);
  also run with `calibrated=False` (its raw physics). Throughput only.
- llm-analysis (PyPI): training latency and memory, full training only; run with its default
  flops_efficiency (1.0) and with 0.5. Throughput and peak memory.
- coastline-recommender (PyPI): recommends a GPU count and batch on top of kavier; compared with
  `tuneplan.plan.search.plan` on three example jobs.

Each peer runs in a subprocess of `--peers-python` through a small JSON-in/JSON-out shim written to a
temporary file; nothing of the peers is imported here.

tuneplan is compared three ways on exactly the rows each peer predicts: its uncalibrated physics
(`get_estimator("tuneplan", "none")`), and its learner's held-out predictions from
`tuneplan.learn.validate.validate`: split="by-source" (each row predicted by a fit without its whole
source) and split="random" (80/20; several seeds so that most rows are held out once; a row's
prediction comes from the first seed that held it out). The shipped calibration is fitted on every
reference row, so it is never compared here. Held-out predictions are cached under --cache-dir
(keyed by the rows and the tuneplan code they depend on); the interval-coverage pass of `validate`
is skipped (no prediction depends on it; coverage is not reported here).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

DEFAULT_PEERS_PYTHON = "/tmp/peers-venv/bin/python"
DEFAULT_CACHE = Path(tempfile.gettempdir()) / "tuneplan-peers"
PEERS = ("kavier", "llm-analysis", "coastline")

# --------------------------------------------------------------------------------------------------
# Name maps: our names -> the names each peer accepts. A model maps only to a catalog entry of the
# same architecture; (key, exact) where exact=False marks a same-architecture stand-in.

KAVIER_MODELS: dict[str, tuple[str, bool]] = {
    "granite-3.1-2b": ("granite-3.1-2b", True),
    "ibm-granite/granite-3.1-2b-base": ("granite-3.1-2b", True),
    "granite-3.1-8b-instruct": ("granite-3.1-8b-instruct", True),
    "ibm-granite/granite-3.1-8b-instruct": ("granite-3.1-8b-instruct", True),
    "ibm-granite/granite-3.1-8b-base": ("granite-3.1-8b-instruct", False),
    "granite-3-8b": ("granite-3-8b", True),
    "ibm-granite/granite-3.0-8b-base": ("granite-3-8b", True),
    "granite-3.3-8b": ("granite-3.3-8b", True),
    "ibm-granite/granite-3.3-8b-base": ("granite-3.3-8b", True),
    "granite-3.1-3b-a800m-instruct": ("granite-3.1-3b-a800m-instruct", True),
    "ibm-granite/granite-3.1-3b-a800m-instruct": ("granite-3.1-3b-a800m-instruct", True),
    "ibm-granite/granite-3.1-3b-a800m-base": ("granite-3.1-3b-a800m-instruct", False),
    "granite-34b-code-base": ("granite-34b-code-base", True),
    "ibm-granite/granite-34b-code-base-8k": ("granite-34b-code-base", True),
    "ibm-granite/granite-34b-code-base": ("granite-34b-code-base", True),
    "granite-3b-code-base-128k": ("granite-3b-code-base-128k", True),
    "ibm-granite/granite-3b-code-base-128k": ("granite-3b-code-base-128k", True),
    "granite-4.0-h-small": ("granite-4.0-h-small", True),
    "ibm-granite/granite-4.0-h-small": ("granite-4.0-h-small", True),
    "meta-llama/meta-llama-3-8b": ("llama3-8b", True),
    "meta-llama/meta-llama-3-8b-instruct": ("llama3-8b", False),
    "meta-llama/llama-3.1-8b": ("llama3.1-8b", True),
    "meta-llama/meta-llama-3.1-8b": ("llama3.1-8b", True),
    "meta-llama/llama-3.2-1b": ("llama3.2-1b", True),
    "meta-llama/llama-3.2-3b": ("llama3.2-3b", True),
    "meta-llama/meta-llama-3-70b": ("llama3-70b", True),
    "meta-llama/llama-3.1-70b": ("llama3.1-70b", True),
    "meta-llama/llama-2-13b-hf": ("Llama-2-13B", True),
    "meta-llama/llama-2-70b-hf": ("llama2-70b", True),
    "huggyllama/llama-7b": ("llama-7b", True),
    # Llama-2-7B has LLaMA-1 7B's shape (32 x 4096, 6.7B): kavier's llama-7b entry
    "meta-llama/llama-2-7b-hf": ("llama-7b", False),
    "meta-llama/llama-2-7b": ("llama-7b", False),
    "meta-llama/llama-2-7b-chat-hf": ("llama-7b", False),
    "nousresearch/llama-2-7b-hf": ("llama-7b", False),
    "mistralai/mistral-7b-v0.1": ("mistral-7b-v0.1", True),
    "unsloth/mistral-7b-v0.2": ("mistral-7b-v0.1", False),
    "mistralai/mixtral-8x7b-instruct-v0.1": ("mixtral-8x7b-instruct-v0.1", True),
    "mistralai/mixtral-8x7b-v0.1": ("mixtral-8x7b-instruct-v0.1", False),
    "mosaicml/mpt-30b": ("MPT-30B", True),
}
KAVIER_GPUS = {
    "A100-SXM4-80GB": "NVIDIA-A100-SXM4-80GB",
    "A100-PCIe-80GB": "NVIDIA-A100-80GB-PCIe",
    "A100-SXM4-40GB": "A100-40GB",
    "A100-PCIe-40GB": "A100-40GB",
    "H100-PCIe-80GB": "NVIDIA-H100-PCIe",
    "H100-SXM5-80GB": "H100-SXM",
    "H200-SXM-141GB": "H200 SXM",
    "L40S-48GB": "L40S",
    "L4-24GB": "L4",
    "A10-24GB": "A10",
}
LLMA_GPUS = {
    "A100-SXM4-80GB": "a100-sxm-80gb",
    "A100-SXM4-40GB": "a100-sxm-40gb",
    "A100-PCIe-80GB": "a100-pcie-80gb",
    "A100-PCIe-40GB": "a100-pcie-40gb",
    "H100-SXM5-80GB": "h100-sxm-80gb",
    "H100-PCIe-80GB": "h100-pcie-80gb",
    "A10G-24GB": "a10g-pcie-24gb",
    "V100-SXM2-16GB": "v100-sxm-16gb",
    "V100-SXM2-32GB": "v100-sxm-32gb",
    "RTX-A6000-48GB": "a6000-48gb",
    "MI250X": "mi250x-128gb",
}
LLMA_EFFICIENCIES = (1.0, 0.5)  # its default flops_efficiency, and the ~0.5 its docs cite for Megatron-LM
LLMA_PARAM_TOLERANCE = 0.15  # rows where llm-analysis's own parameter count is further off are listed

# coastline examples: coastline (kavier) names and tuneplan names of the same job
COASTLINE_JOBS = (
    {"label": "granite-3.1-8b full, A100-SXM4-80GB, seq 4096", "coastline_model": "granite-3.1-8b-instruct",
     "kavier_model": "granite-3.1-8b-instruct", "tuneplan_model": "ibm-granite/granite-3.1-8b-base",
     "method": "full", "coastline_gpu": "NVIDIA-A100-SXM4-80GB", "tuneplan_gpu": "A100-SXM4-80GB", "seq_len": 4096},
    {"label": "granite-3.1-2b LoRA, A100-SXM4-80GB, seq 8192", "coastline_model": "granite-3.1-2b",
     "kavier_model": "granite-3.1-2b", "tuneplan_model": "ibm-granite/granite-3.1-2b-base",
     "method": "lora", "coastline_gpu": "NVIDIA-A100-SXM4-80GB", "tuneplan_gpu": "A100-SXM4-80GB", "seq_len": 8192},
    {"label": "Llama-3.1-8B LoRA, H100-PCIe-80GB, seq 2048", "coastline_model": "meta-llama/Llama-3.1-8B",
     "kavier_model": "llama3.1-8b", "tuneplan_model": "meta-llama/Llama-3.1-8B",
     "method": "lora", "coastline_gpu": "NVIDIA-H100-PCIe", "tuneplan_gpu": "H100-PCIe-80GB", "seq_len": 2048},
)
COASTLINE_MAX_GPUS = 8
COASTLINE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
PLAN_EXAMPLES = 20_000

# --------------------------------------------------------------------------------------------------
# Shims: run by the peers' interpreter, JSON on stdin, JSON on stdout.

KAVIER_SHIM = r'''
import json, sys, warnings
warnings.simplefilter("ignore")
import kavier
from kavier import GPU_SPEC_LIBRARY, LLM_SPEC_LIBRARY, simulate_training_step
from kavier.sdk.training.core.engine import known_methods
import kavier.sdk.training.calibration as cal

req = json.load(sys.stdin)
table = cal.use_calibration("default")
out = {"version": kavier.__version__, "models": sorted(LLM_SPEC_LIBRARY), "gpus": sorted(GPU_SPEC_LIBRARY),
       "methods": known_methods(), "calibrated_models": sorted(table.get("model_scale", {})),
       "calibrated_gpus": sorted(table.get("mfu_multiplier", {})),
       "calibrated_gpu_counts": sorted(int(k) for k in table["multi_gpu_correction"]["by_num_gpus"]),
       "rows": []}
for r in req.get("rows", []):
    res = {"id": r["id"]}
    for calibrated, key in ((True, "tokens_per_s"), (False, "tokens_per_s_raw")):
        try:
            s = simulate_training_step(model_name=r["model"], gpu_model=r["gpu"], tokens_per_sample=int(r["seq_len"]),
                                       batch_size=int(r["micro_batch"]), method=r["method"], num_gpus=int(r["gpus"]),
                                       num_nodes=int(r["nodes"]), grad_accum_steps=int(r["grad_accum"]),
                                       calibrated=calibrated)
            res[key] = float(s["tokens_per_second"])
        except Exception as e:  # an unsupported input: kavier's own message
            res["error"] = f"{type(e).__name__}: {e}"
    cell = f'{r["model"]}|{r["method"]}|{r["gpu"]}|{int(r["gpus"])}'
    res["in_calibration"] = {"model": r["model"] in table.get("model_scale", {}),
                             "gpu": r["gpu"] in table.get("mfu_multiplier", {}),
                             "cell": cell in table.get("interaction_scale", {})}
    out["rows"].append(res)
json.dump(out, sys.stdout)
'''

LLMA_SHIM = r'''
import json, logging, os, sys, warnings
warnings.simplefilter("ignore")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
from llm_analysis.logger import logger
logger.setLevel(logging.ERROR)
from llm_analysis.analysis import ActivationRecomputation, DSZeRO, LLMAnalysis
from llm_analysis.config import (GPUConfig, ModelConfig, ParallelismConfig, get_dtype_config_by_name,
                                 get_gpu_config_by_name, gpu_configs)
from importlib.metadata import version

req = json.load(sys.stdin)
out = {"version": version("llm-analysis"), "gpus": sorted(gpu_configs), "rows": []}
for r in req.get("rows", []):
    res = {"id": r["id"]}
    try:
        mc = ModelConfig(**r["model_config"])
        gpu = get_gpu_config_by_name(r["gpu"]) if isinstance(r["gpu"], str) else GPUConfig(**r["gpu"])
        par = ParallelismConfig(tp_size=r["tp"], pp_size=r["pp"], dp_size=r["dp"], ep_size=r["ep"])
        for eff in r["efficiencies"]:
            a = LLMAnalysis(mc, gpu, get_dtype_config_by_name(r["dtype"]), par, flops_efficiency=eff)
            s = a.training(batch_size_per_gpu=r["micro_batch"], gradient_accumulation_steps=r["grad_accum"],
                           global_batch_size=r["micro_batch"] * r["grad_accum"] * r["dp"], seq_len=r["seq_len"],
                           activation_recomputation=ActivationRecomputation(r["recompute"]),
                           ds_zero=DSZeRO(r["ds_zero"]), flash_attn=bool(r["flash_attn"]),
                           other_op_bytes=r["other_op_bytes"])
            res[f"latency_per_iter_s@{eff}"] = s["latency_per_iter"]
            res[f"tokens_per_s@{eff}"] = s["global_batch_size"] * r["seq_len"] / s["latency_per_iter"]
        res["mem_gib"] = s["(weight+op_state+grad+act)_memory_per_gpu"] / 2**30
        res["params_total"] = float(a.total_num_params)
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"
    out["rows"].append(res)
json.dump(out, sys.stdout)
'''

COASTLINE_SHIM = r'''
import json, logging, sys, warnings
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
from importlib.metadata import version
from coastline.sdk.recommend.facade import Coastline

req = json.load(sys.stdin)
out = {"version": version("coastline-recommender"), "jobs": []}
c = Coastline()
for j in req["jobs"]:
    res = {"label": j["label"]}
    try:
        recs = c.recommend({"llm_model": j["model"], "fine_tuning_method": j["method"], "gpu_model": j["gpu"],
                            "tokens_per_sample": j["seq_len"], "batch_size": 1}, goal=j["goal"],
                           max_gpus=j["max_gpus"], batch_sizes=j["batch_sizes"], top_k=j["top_k"])
        res["recommendations"] = [{
            "total_gpus": r.total_gpus, "gpus_per_node": r.gpus_per_node, "nodes": r.number_of_nodes,
            "batch_size_per_gpu": r.metadata.get("batch_size"), "tokens_per_s": r.predicted_throughput,
            "power_w": r.metadata.get("predicted_power_watts"), "rank": r.metadata.get("rank"),
            "strategy": r.strategy, "feasibility": str(r.metadata.get("feasibility"))} for r in recs]
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"
    out["jobs"].append(res)
json.dump(out, sys.stdout, default=str)
'''


def run_shim(python: str, code: str, payload: dict, timeout: float = 900) -> dict:
    """Run a shim with the peers' interpreter; raise RuntimeError with its stderr on failure."""
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(code)
        path = f.name
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    try:
        p = subprocess.run([python, path], input=json.dumps(payload), capture_output=True, text=True,
                           timeout=timeout, env=env, cwd=tempfile.gettempdir())
    finally:
        os.unlink(path)
    if p.returncode != 0:
        raise RuntimeError(f"peer shim failed (rc {p.returncode}): {p.stderr.strip()[-2000:]}")
    return json.loads(p.stdout)


# --------------------------------------------------------------------------------------------------
# Rows and tuneplan's predictions


def load_rows():
    """The reference rows tuneplan can configure (duplicates and estimates out), with measurements."""
    from tuneplan.learn.measured import training_set
    from tuneplan.runs import load_reference_runs

    df = load_reference_runs().df
    ts = training_set(df)
    recs = []
    for i, c in enumerate(ts.configs):
        r = ts.df.iloc[i]
        j = c.job
        recs.append({
            "id": str(r["id"]), "source": str(r["source"]), "model": str(r.get("model") or ""),
            "model_hf_id": str(r.get("model_hf_id") or "") if r.get("model_hf_id") == r.get("model_hf_id") else "",
            "model_resolved": c.model.name, "gpu": c.gpu.name, "method": j.method,
            "row_method": str(r.get("method") or ""), "gpus": j.gpus, "nodes": j.nodes, "dp": j.dp, "tp": j.tp,
            "pp": j.pp, "cp": j.cp, "ep": j.ep, "sharding": j.sharding_kind(), "micro_batch": j.micro_batch,
            "grad_accum": j.grad_accum, "seq_len": int(c.seq_len), "precision": j.precision, "optimizer": j.optimizer,
            "grad_ckpt": bool(j.grad_ckpt), "flash_attn": bool(j.flash_attn), "quant": j.base_quant(c.model.quant),
            "measured_tokens_per_s": float(ts.tokens_per_s[i]), "measured_mem_gib": float(ts.peak_mem_gib[i]),
            "mem_kind": ts.mem_kind[i],
        })
    return df, ts, pd.DataFrame(recs)


def tuneplan_uncalibrated(ts) -> tuple[np.ndarray, np.ndarray]:
    from tuneplan.estimators.base import get_estimator
    from tuneplan.learn.predict_table import memory_for_kind, predict_configs

    p = predict_configs(ts.configs, get_estimator("tuneplan", "none"), with_max_batch=False)
    return np.asarray(p["tokens_per_s"], float), memory_for_kind(p, ts.mem_kind)


def _code_key(ts) -> str:
    """Rows + the tuneplan code and data a held-out prediction depends on."""
    h = hashlib.sha256(ts.fingerprint().encode())
    pkg = ROOT / "src" / "tuneplan"
    files = []
    for sub in ("learn", "physics", "estimators", "specs", "runs"):
        files += sorted((pkg / sub).rglob("*.py"))
    files += sorted((pkg / "data").glob("*.yaml")) + sorted((pkg / "data").glob("*.csv"))
    files += sorted((pkg / "data" / "models").glob("*.json"))
    for f in files:
        h.update(str(f.relative_to(pkg)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _validate_task(split: str, seed: int) -> tuple[pd.DataFrame, list[str], float]:
    """validate() with only the tuneplan learner; its interval-coverage pass is skipped (unused here)."""
    from unittest import mock

    import tuneplan.learn.calibration as calmod
    from tuneplan.learn.validate import validate
    from tuneplan.runs import load_reference_runs

    t0 = time.time()
    df = load_reference_runs().df
    with mock.patch.object(calmod, "out_of_fold_residuals", lambda *a, **k: {"throughput": []}):
        rep = validate(df, split=split, seed=seed, learners=("tuneplan",))
    rows = rep.rows[rep.rows["estimator"] == "tuneplan"][["fold", "id", "source", "pred_tokens_per_s",
                                                          "pred_mem_gib"]].copy()
    return rows, list(rep.messages), time.time() - t0


def _task_path(cache: Path, split: str, seed: int, key: str, ext: str = "csv") -> Path:
    return cache / f"validate-{split}-seed{seed}-{key}.{ext}"


def _complete(cache: Path, key: str, seeds: int) -> bool:
    tasks = [("by-source", 0)] + [("random", s) for s in range(seeds)]
    return all(_task_path(cache, sp, sd, key).exists() for sp, sd in tasks)


def held_out(ts, cache: Path, seeds: int, jobs: int, refresh: bool, stale_ok: bool, log) -> dict[str, Any]:
    """Held-out tuneplan predictions, by-source and random (first seed that holds a row out)."""
    cache.mkdir(parents=True, exist_ok=True)
    key = current = _code_key(ts)
    if stale_ok and not refresh and not _complete(cache, key, seeds):
        older = sorted(cache.glob("validate-by-source-seed0-*.csv"), key=lambda p: p.stat().st_mtime, reverse=True)
        for p in older:
            k = p.stem.rsplit("-", 1)[1]
            if _complete(cache, k, seeds):
                key = k
                log(f"held-out predictions: --stale-ok, using cache {k} (the rows or tuneplan's code changed "
                    f"since; current key {current})")
                break
    tasks = [("by-source", 0)] + [("random", s) for s in range(seeds)]
    paths = {t: _task_path(cache, t[0], t[1], key) for t in tasks}
    todo = [t for t in tasks if refresh or not paths[t].exists()]
    if todo:
        log(f"held-out predictions: running validate for {len(todo)} split(s) "
            f"({', '.join(f'{s} seed {n}' for s, n in todo)}) in {max(1, jobs)} process(es); cached in {cache}. "
            "Each learner fit takes minutes: by-source fits once per source.")
        with ProcessPoolExecutor(max_workers=max(1, jobs)) as ex:
            futs = {ex.submit(_validate_task, *t): t for t in todo}
            for fut in as_completed(futs):
                t = futs[fut]
                rows, msgs, secs = fut.result()
                rows.to_csv(paths[t], index=False)
                _task_path(cache, t[0], t[1], key, "json").write_text(
                    json.dumps({"messages": msgs, "seconds": round(secs, 1)}))
                log(f"  {t[0]} seed {t[1]}: {len(rows)} held-out rows in {secs:.0f} s")
    else:
        log(f"held-out predictions: cached ({cache}, key {key})")
    meta = {}
    for t in tasks:
        mp = _task_path(cache, t[0], t[1], key, "json")
        if mp.exists():
            meta[f"{t[0]} seed {t[1]}"] = json.loads(mp.read_text())
    out: dict[str, Any] = {"key": key, "current_key": current, "messages": meta}
    bs = pd.read_csv(paths[("by-source", 0)], dtype={"id": str})
    out["by-source"] = bs.drop_duplicates("id").set_index("id")
    rnd = []
    for s in range(seeds):
        r = pd.read_csv(paths[("random", s)], dtype={"id": str})
        r["seed"] = s
        rnd.append(r)
    r = pd.concat(rnd).drop_duplicates("id", keep="first")  # first seed holding the row out
    out["random"] = r.set_index("id")
    return out


# --------------------------------------------------------------------------------------------------
# Peer inputs


def _lower(s: Any) -> str:
    return str(s or "").strip().lower()


def kavier_request(rows: pd.DataFrame, catalog: dict) -> tuple[list[dict], dict[str, str], dict[str, bool]]:
    """Kavier inputs for the rows it can take; the reason for each it cannot; same-architecture flags."""
    models, gpus, methods = set(catalog["models"]), set(catalog["gpus"]), set(catalog["methods"])
    req, why, stand_in = [], {}, {}
    for r in rows.itertuples():
        m = next((KAVIER_MODELS[k] for k in (_lower(r.model_hf_id), _lower(r.model_resolved), _lower(r.model))
                  if k in KAVIER_MODELS), None)
        g = KAVIER_GPUS.get(r.gpu)
        if m is None or m[0] not in models:
            why[r.id] = "model not in kavier's catalog"
        elif g is None or g not in gpus:
            why[r.id] = "GPU not in kavier's catalog"
        elif r.method not in methods:
            why[r.id] = f"method {r.method} not modelled"
        elif r.tp * r.pp * r.cp > 1 or r.ep > 1:
            why[r.id] = "tensor/pipeline/context/expert parallelism (kavier: data parallel only)"
        elif "offload" in r.sharding:
            why[r.id] = "CPU offload not modelled"
        else:
            req.append({"id": r.id, "model": m[0], "gpu": g, "method": r.method, "seq_len": r.seq_len,
                        "micro_batch": r.micro_batch, "grad_accum": r.grad_accum, "gpus": r.gpus, "nodes": r.nodes})
            stand_in[r.id] = not m[1]
    return req, why, stand_in


def llma_model_config(spec, seq_len: int) -> tuple[dict | None, str]:
    """An llm-analysis ModelConfig (as a dict) built from tuneplan's catalog spec, or a reason why not."""
    if spec.is_encoder_decoder:
        return None, "encoder-decoder model"
    if spec.n_attention_layers not in (-1, spec.n_layers):
        return None, "hybrid/SSM layers (llm-analysis: transformer blocks only)"
    if spec.n_shared_experts or (spec.is_moe and spec.n_moe_layers not in (0, spec.n_layers)):
        return None, "MoE with shared experts or mixed dense/MoE layers"
    inter = spec.moe_intermediate_size if spec.is_moe and spec.moe_intermediate_size else spec.intermediate_size
    if not inter:
        return None, "no MLP width in the config"
    # llm-analysis counts 2 x hidden x ffn MLP weights; for a gated MLP (3 matrices) its own shipped
    # Llama configs use ffn = 1.5 x intermediate_size, which gives the right weight count
    ffn = int(round(inter * 1.5)) if spec.gated_mlp else int(inter)
    cfg = {"name": spec.name.replace("/", "_"), "num_layers": spec.n_layers, "n_head": spec.n_heads,
           "hidden_dim": spec.hidden_size, "vocab_size": spec.vocab_size,
           "max_seq_len": max(int(spec.max_position_embeddings or 0), int(seq_len)),
           "num_key_value_heads": spec.n_kv_heads, "ffn_embed_dim": ffn,
           "expansion_ratio": ffn / spec.hidden_size, "model_type": spec.model_type}
    if spec.is_moe:
        cfg["moe_num_experts"] = int(spec.n_experts)
        cfg["moe_top_k"] = int(spec.experts_per_token)
    return cfg, ""


def llma_request(rows: pd.DataFrame, ts, catalog_gpus: set[str]) -> tuple[list[dict], dict[str, str], dict[str, str]]:
    """llm-analysis inputs; reasons for rows it cannot take at all; rows it takes for memory only."""
    from tuneplan.specs.gpu import resolve_gpu

    zero = {"none": 0, "ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3, "hybrid": 3}
    opt_bytes = {"adamw": None, "adamw-8bit": 2, "paged-adamw-8bit": 2, "sgd": 0, "sgd-momentum": 4}
    by_id = {str(ts.df["id"].iloc[i]): c for i, c in enumerate(ts.configs)}
    req, why, mem_only = [], {}, {}
    for r in rows.itertuples():
        c = by_id[r.id]
        if r.method != "full":
            why[r.id] = f"method {r.method} (llm-analysis: every weight trained)"
            continue
        if r.precision not in ("bf16", "fp16"):
            why[r.id] = f"precision {r.precision} (llm-analysis here: 16-bit weights and activations)"
            continue
        if r.sharding not in zero:
            why[r.id] = f"sharding {r.sharding} not modelled"
            continue
        if r.optimizer not in opt_bytes:
            why[r.id] = f"optimizer {r.optimizer} not modelled"
            continue
        if r.cp > 1:
            why[r.id] = "context parallelism not modelled"
            continue
        cfg, reason = llma_model_config(c.model, r.seq_len)
        if cfg is None:
            why[r.id] = reason
            continue
        g = LLMA_GPUS.get(r.gpu)
        if g is not None and g in catalog_gpus:
            gpu: Any = g
        else:  # memory does not depend on the GPU: run it with our spec, throughput not counted
            spec = resolve_gpu(r.gpu)
            gpu = {"name": spec.name, "mem_per_GPU_in_GB": spec.memory_gib,
                   "hbm_bandwidth_in_GB_per_sec": spec.memory_bandwidth_gbs,
                   "intra_node_bandwidth_in_GB_per_sec": spec.intra_node_gbs or 32.0,
                   "intra_node_min_message_latency": 8e-6, "peak_fp16_TFLOPS": spec.tflops("bf16")}
            mem_only[r.id] = "GPU not in llm-analysis's catalog"
        req.append({"id": r.id, "model_config": cfg, "gpu": gpu, "tp": r.tp, "pp": r.pp, "dp": r.dp, "ep": r.ep,
                    "micro_batch": r.micro_batch, "grad_accum": r.grad_accum, "seq_len": r.seq_len,
                    "recompute": 2 if r.grad_ckpt else 0, "ds_zero": zero[r.sharding], "flash_attn": r.flash_attn,
                    "other_op_bytes": opt_bytes[r.optimizer], "dtype": "w16a16e16",
                    "efficiencies": list(LLMA_EFFICIENCIES), "params_tuneplan": float(c.model.params_total)})
    return req, why, mem_only


# --------------------------------------------------------------------------------------------------
# Metrics and tables


def ape(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    return np.abs(np.asarray(pred, float) / np.asarray(meas, float) - 1.0)


def mdape(pred, meas) -> float:
    a = ape(pred, meas)
    a = a[np.isfinite(a)]
    return float(np.median(a)) * 100 if len(a) else float("nan")


def comparison(frame: pd.DataFrame, meas: str, cols: dict[str, str], extra_groups=()) -> list[dict]:
    """MdAPE (%) of each predictor column on rows where all are finite, per source and overall."""
    ok = np.isfinite(frame[meas].to_numpy(float))
    for c in cols.values():
        ok &= np.isfinite(frame[c].to_numpy(float)) & (frame[c].to_numpy(float) > 0)
    f = frame[ok]
    groups = [(s, f[f["source"] == s]) for s in sorted(f["source"].unique())] + [("ALL", f)]
    groups += [(name, f[mask(f)]) for name, mask in extra_groups]
    out = []
    for name, g in groups:
        if not len(g):
            continue
        rec: dict[str, Any] = {"source": name, "n": int(len(g))}
        for label, c in cols.items():
            rec[label] = mdape(g[c], g[meas])
        out.append(rec)
    return out


def coverage(frame: pd.DataFrame, meas: str, peer_cols: list[str], tp: dict[str, str]) -> dict[str, int]:
    """Rows with a measurement the peer predicts, and how many of them lack each tuneplan prediction."""
    has = np.isfinite(frame[meas].to_numpy(float))
    for c in peer_cols:
        has &= np.isfinite(frame[c].to_numpy(float))
    out = {"peer_predicts": int(has.sum())}
    for label, c in tp.items():
        out[f"without {label}"] = int((has & ~np.isfinite(frame[c].to_numpy(float))).sum())
    return out


def wider(frame: pd.DataFrame, meas: str, cols: dict[str, str]) -> tuple[dict, str]:
    """The overall row without requiring a random-split prediction (more rows, one column fewer)."""
    cols = {k: v for k, v in cols.items() if not v.startswith("tp_rnd")}
    rec = next(r for r in comparison(frame, meas, cols) if r["source"] == "ALL")
    body = ", ".join(f"{k} {v:.1f}" for k, v in rec.items() if k not in ("source", "n"))
    return rec, f"  without the random-split column: n={rec['n']}: {body}\n"


def coverage_text(cov: dict[str, int], what: str) -> str:
    lacks = ", ".join(f"{v} {k}" for k, v in cov.items() if k != "peer_predicts" and v)
    return (f"  the peer predicts {cov['peer_predicts']} rows with measured {what}"
            + (f"; left out: {lacks}" if lacks else "") + "\n")


def fmt_table(records: list[dict], title: str) -> str:
    if not records:
        return f"{title}\n  (no rows)\n"
    keys = list(records[0])
    cells = [[str(k) for k in keys]]
    for r in records:
        cells.append([f"{v:.1f}" if isinstance(v, float) else str(v) for v in r.values()])
    w = [max(len(row[i]) for row in cells) for i in range(len(keys))]
    lines = [title]
    for j, row in enumerate(cells):
        lines.append("  " + "  ".join(s.ljust(w[i]) if i == 0 else s.rjust(w[i]) for i, s in enumerate(row)))
        if j == 0:
            lines.append("  " + "  ".join("-" * x for x in w))
    return "\n".join(lines) + "\n"


def reason_counts(why: dict[str, str], rows: pd.DataFrame) -> list[dict]:
    src = rows.set_index("id")["source"]
    out: dict[str, dict] = {}
    for i, reason in why.items():
        d = out.setdefault(reason, {"reason": reason, "rows": 0, "sources": {}})
        d["rows"] += 1
        s = src.get(i, "?")
        d["sources"][s] = d["sources"].get(s, 0) + 1
    return sorted(out.values(), key=lambda d: -d["rows"])


# --------------------------------------------------------------------------------------------------
# coastline vs tuneplan plan


def _tuneplan_best_setup(model: str, gpu: str, method: str, gpus: int, micro_batch: int, seq_len: int) -> dict:
    """tuneplan's estimate of one configuration: the fastest sharding/checkpointing that fits, else the
    smallest memory (default calibration, the figures `tuneplan estimate` prints)."""
    from tuneplan.api import estimate

    best: dict | None = None
    for sharding in ("ddp", "fsdp"):
        for ckpt in (False, True):
            if gpus == 1 and sharding == "fsdp":
                continue
            try:
                e = estimate(model, gpu, method=method, gpus=gpus, nodes=1, micro_batch=micro_batch, grad_accum=1,
                             seq_len=seq_len, sharding=sharding, grad_ckpt=ckpt, examples=PLAN_EXAMPLES,
                             interval=None)
            except Exception as exc:  # reported, not fatal
                return {"error": str(exc)}
            cand = {"sharding": sharding, "grad_ckpt": ckpt, "tokens_per_s": e.tokens_per_s,
                    "memory_per_gpu_gib": e.memory_per_gpu_gib, "memory_capacity_gib": e.memory_capacity_gib,
                    "fits": bool(e.fits)}
            if best is None or (cand["fits"], cand["tokens_per_s"] if cand["fits"] else -cand["memory_per_gpu_gib"]) > (
                    best["fits"], best["tokens_per_s"] if best["fits"] else -best["memory_per_gpu_gib"]):
                best = cand
    return best or {}


def _measured_at(m: pd.DataFrame, gpus: int, micro_batch: int, grad_accum: int) -> dict | None:
    hit = m[(m["gpus"] == gpus) & (m["micro_batch"] == micro_batch) & (m["grad_accum"] == grad_accum)]
    if hit.empty:
        return None
    return {"id": str(hit["id"].iloc[0]), "tokens_per_s": float(hit["measured_tokens_per_s"].iloc[0])}


def coastline_compare(python: str, rows: pd.DataFrame, log) -> dict:
    from tuneplan.plan.search import describe
    from tuneplan.plan.search import plan_run as plan

    jobs = [{"label": j["label"], "model": j["coastline_model"], "method": j["method"], "gpu": j["coastline_gpu"],
             "seq_len": j["seq_len"], "goal": "performance",
             "max_gpus": COASTLINE_MAX_GPUS, "batch_sizes": list(COASTLINE_BATCHES), "top_k": 3} for j in COASTLINE_JOBS]
    t0 = time.time()
    co = run_shim(python, COASTLINE_SHIM, {"jobs": jobs}, timeout=1200)
    log(f"coastline: {len(jobs)} recommendations in {time.time() - t0:.0f} s")
    results = []
    kavier_eval = []
    for job, cj in zip(COASTLINE_JOBS, co["jobs"], strict=True):
        label, tmodel, method, tgpu, seq = (job["label"], job["tuneplan_model"], job["method"], job["tuneplan_gpu"],
                                            job["seq_len"])
        res: dict[str, Any] = {"job": label, "coastline": cj}
        m = rows[(rows["model_resolved"] == tmodel) & (rows["method"] == method) & (rows["gpu"] == tgpu)
                 & (rows["seq_len"] == seq) & (rows["gpus"] <= COASTLINE_MAX_GPUS)
                 & np.isfinite(rows["measured_tokens_per_s"])]
        top = (cj.get("recommendations") or [None])[0]
        if top:
            res["coastline_top_under_tuneplan"] = _tuneplan_best_setup(
                tmodel, tgpu, method, int(top["total_gpus"]), int(top["batch_size_per_gpu"]), seq)
        variants = {
            "tuneplan plan (default space: global batch 32)": {},
            "tuneplan plan (coastline's space: grad-accum 1, micro-batch 1..256)": {
                "grad_accums": [1], "micro_batches": list(COASTLINE_BATCHES)},
            "tuneplan plan (uncalibrated physics, default space)": {"calibration": "none"},
        }
        res["tuneplan"] = {}
        for name, kw in variants.items():
            try:
                p = plan(tmodel, gpus=[tgpu], methods=[method], max_gpus=COASTLINE_MAX_GPUS, objective="fastest",
                         seq_len=seq, examples=PLAN_EXAMPLES, interval=None, **kw)
                rec = dict(p.recommended) if p.recommended else None
                res["tuneplan"][name] = {"ok": p.ok, "message": p.message,
                                         "recommended": {k: rec[k] for k in (
                                             "gpus", "nodes", "micro_batch", "grad_accum", "global_batch",
                                             "sharding", "grad_ckpt", "tokens_per_s", "memory_per_gpu_gib",
                                             "memory_capacity_gib", "time_h")} if rec else None,
                                         "description": describe(rec) if rec else None}
                if rec:
                    kavier_eval.append({"id": f"{label} | {name}", "model": job["kavier_model"],
                                        "gpu": job["coastline_gpu"], "method": method, "seq_len": seq, "micro_batch": int(rec["micro_batch"]), "grad_accum": int(rec["grad_accum"]),
                        "gpus": int(rec["gpus"]), "nodes": int(rec["nodes"])})
            except Exception as exc:  # plan is new: report, continue
                res["tuneplan"][name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        # measured: the best on <= 8 GPUs, and each answer's configuration, where the reference has them
        if top:
            res["coastline_top_measured"] = _measured_at(m, int(top["total_gpus"]), int(top["batch_size_per_gpu"]), 1)
        for t in res["tuneplan"].values():
            if t.get("recommended"):
                r = t["recommended"]
                t["measured"] = _measured_at(m, int(r["gpus"]), int(r["micro_batch"]), int(r["grad_accum"]))
        if len(m):
            b = m.loc[m["measured_tokens_per_s"].idxmax()]
            res["measured_best"] = {"id": b["id"], "gpus": int(b["gpus"]), "micro_batch": int(b["micro_batch"]),
                                    "tokens_per_s": float(b["measured_tokens_per_s"]), "rows": int(len(m))}
            res["measured_grid"] = [{"gpus": int(x.gpus), "micro_batch": int(x.micro_batch),
                                     "tokens_per_s": float(x.measured_tokens_per_s)}
                                    for x in m.sort_values(["gpus", "micro_batch"]).itertuples()]
        results.append(res)
    if kavier_eval:
        kv = run_shim(python, KAVIER_SHIM, {"rows": kavier_eval})
        by = {r["id"]: r for r in kv["rows"]}
        for res in results:
            for name, t in res["tuneplan"].items():
                k = by.get(f"{res['job']} | {name}")
                if k and t.get("recommended"):
                    t["kavier_tokens_per_s"] = k.get("tokens_per_s")
    return {"version": co.get("version"), "jobs": results}


def coastline_text(cmp: dict) -> str:
    lines = [f"coastline-recommender {cmp.get('version')} (goal=performance, <= {COASTLINE_MAX_GPUS} GPUs) "
             "vs tuneplan plan (objective=fastest)"]
    for res in cmp["jobs"]:
        lines.append(f"  {res['job']}")
        cj = res["coastline"]
        if cj.get("error"):
            lines.append(f"    coastline: error {cj['error']}")
        for r in (cj.get("recommendations") or [])[:1]:
            cm = res.get("coastline_top_measured")
            lines.append(f"    coastline: {r['total_gpus']} GPU x batch {r['batch_size_per_gpu']}/GPU, "
                         f"kavier {r['tokens_per_s']:.0f} tok/s"
                         + (f"; measured {cm['tokens_per_s']:.0f} tok/s ({cm['id']})" if cm else ""))
        tu = res.get("coastline_top_under_tuneplan")
        if tu and "tokens_per_s" in tu:
            lines.append(f"      under tuneplan: {tu['tokens_per_s']:.0f} tok/s, {tu['memory_per_gpu_gib']:.0f} of "
                         f"{tu['memory_capacity_gib']:.0f} GiB/GPU ({tu['sharding']}, "
                         f"{'ckpt' if tu['grad_ckpt'] else 'no ckpt'}): {'fits' if tu['fits'] else 'DOES NOT FIT'}")
        for name, t in res["tuneplan"].items():
            if t.get("recommended"):
                rec = t["recommended"]
                kv = t.get("kavier_tokens_per_s")
                tm = t.get("measured")
                lines.append(f"    {name}: {t['description']}, {rec['tokens_per_s']:.0f} tok/s, "
                             f"{rec['memory_per_gpu_gib']:.0f} GiB/GPU" + (f"; kavier says {kv:.0f} tok/s" if kv else "")
                             + (f"; measured {tm['tokens_per_s']:.0f} tok/s ({tm['id']})" if tm else ""))
            else:
                lines.append(f"    {name}: {t.get('error') or t.get('message')}")
        mb = res.get("measured_best")
        if mb:
            lines.append(f"    measured best (<= {COASTLINE_MAX_GPUS} GPUs, {mb['rows']} rows): {mb['gpus']} GPU x "
                         f"batch {mb['micro_batch']}/GPU, {mb['tokens_per_s']:.0f} tok/s ({mb['id']})")
    return "\n".join(lines) + "\n"


def md_table(records: list[dict]) -> str:
    if not records:
        return "(no rows)\n"
    keys = list(records[0])
    numeric = [all(isinstance(r[k], (int, float)) for r in records) for k in keys]
    out = ["| " + " | ".join(keys) + " |", "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
    for r in records:
        out.append("| " + " | ".join(f"{v:.1f}" if isinstance(v, float) else str(v) for v in r.values()) + " |")
    return "\n".join(out) + "\n"


def markdown(results: dict) -> str:
    """The tables of docs/peers.md, from a results dict."""
    parts = []
    k = results["peers"].get("kavier")
    if k:
        parts.append(f"### kavier {k['version']}: throughput MdAPE (%)\n\n" + md_table(k["throughput"]))
    la = results["peers"].get("llm-analysis")
    if la:
        parts.append(f"### llm-analysis {la['version']}: throughput MdAPE (%)\n\n" + md_table(la["throughput"]))
        parts.append(f"### llm-analysis {la['version']}: peak memory MdAPE (%)\n\n" + md_table(la["memory"]))
    co = results["peers"].get("coastline")
    if co and "jobs" in co:
        recs = []
        for res in co["jobs"]:
            for r in (res["coastline"].get("recommendations") or [])[:1]:
                tu = res.get("coastline_top_under_tuneplan") or {}
                cm = res.get("coastline_top_measured")
                recs.append({"job": res["job"], "answer": f"coastline {co.get('version')}",
                             "configuration": f"{r['total_gpus']} GPU x batch {r['batch_size_per_gpu']}/GPU",
                             "kavier tok/s": f"{r['tokens_per_s']:.0f}",
                             "tuneplan tok/s, GiB/GPU": (f"{tu['tokens_per_s']:.0f}, {tu['memory_per_gpu_gib']:.0f}"
                                                         f"{'' if tu['fits'] else ' (does not fit)'}")
                             if "tokens_per_s" in tu else "",
                             "measured tok/s": f"{cm['tokens_per_s']:.0f}" if cm else ""})
            for name, t in res["tuneplan"].items():
                rec, tm, kv = t.get("recommended"), t.get("measured"), t.get("kavier_tokens_per_s")
                recs.append({"job": res["job"], "answer": name.replace("tuneplan plan ", "tuneplan "),
                             "configuration": (f"{rec['gpus']} GPU x micro-batch {rec['micro_batch']} x GA "
                                               f"{rec['grad_accum']}, {rec['sharding']}"
                                               f"{', ckpt' if rec['grad_ckpt'] else ''}") if rec else
                             (t.get("error") or t.get("message") or ""),
                             "kavier tok/s": f"{kv:.0f}" if kv else "",
                             "tuneplan tok/s, GiB/GPU": f"{rec['tokens_per_s']:.0f}, {rec['memory_per_gpu_gib']:.0f}"
                             if rec else "",
                             "measured tok/s": f"{tm['tokens_per_s']:.0f}" if tm else ""})
            mb = res.get("measured_best")
            if mb:
                recs.append({"job": res["job"], "answer": f"measured best (<= {COASTLINE_MAX_GPUS} GPUs)",
                             "configuration": f"{mb['gpus']} GPU x batch {mb['micro_batch']}/GPU",
                             "kavier tok/s": "", "tuneplan tok/s, GiB/GPU": "",
                             "measured tok/s": f"{mb['tokens_per_s']:.0f}"})
        parts.append("### coastline-recommender vs tuneplan plan\n\n" + md_table(recs))
    return "\n".join(parts)


# --------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peers-python", default=DEFAULT_PEERS_PYTHON,
                    help="python of the virtual environment with kavier, llm-analysis, coastline-recommender")
    ap.add_argument("--out", default=str(DEFAULT_CACHE / "peers-results.json"), help="results JSON")
    ap.add_argument("--cache-dir", default=str(DEFAULT_CACHE), help="held-out prediction cache")
    ap.add_argument("--random-seeds", type=int, default=10, help="seeds of the random split (default 10)")
    ap.add_argument("--jobs", type=int, default=2, help="parallel validate processes (default 2)")
    ap.add_argument("--refresh", action="store_true", help="recompute the cached held-out predictions")
    ap.add_argument("--stale-ok", action="store_true",
                    help="reuse the newest complete held-out cache even if tuneplan's code or rows changed since")
    ap.add_argument("--markdown", default=None, help="also write the tables as Markdown to this file")
    ap.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated subset of {','.join(PEERS)}")
    args = ap.parse_args(argv)
    t_start = time.time()
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = set(peers) - set(PEERS)
    if unknown:
        ap.error(f"unknown peer(s): {', '.join(sorted(unknown))}")
    if not Path(args.peers_python).exists():
        ap.error(f"--peers-python {args.peers_python} not found (see docs/peers.md to create the environment)")

    def log(msg: str) -> None:
        print(f"[{time.time() - t_start:5.0f}s] {msg}", file=sys.stderr, flush=True)

    df, ts, rows = load_rows()
    n_skipped = len(df) - len(rows)
    log(f"{len(df)} reference rows; {len(rows)} configured by tuneplan ({n_skipped} out: duplicates, "
        f"estimates or not configurable); {int(np.isfinite(rows.measured_tokens_per_s).sum())} with usable "
        f"throughput, {int(np.isfinite(rows.measured_mem_gib).sum())} with usable peak memory")

    thr_u, mem_u = tuneplan_uncalibrated(ts)
    rows["tp_uncal_tps"], rows["tp_uncal_mem"] = thr_u, mem_u
    ho = held_out(ts, Path(args.cache_dir), args.random_seeds, args.jobs, args.refresh, args.stale_ok, log)
    for split, tag in (("by-source", "tp_src"), ("random", "tp_rnd")):
        h = ho[split]
        rows[f"{tag}_tps"] = rows["id"].map(h["pred_tokens_per_s"]).astype(float)
        rows[f"{tag}_mem"] = rows["id"].map(h["pred_mem_gib"]).astype(float)
    rows["tp_rnd_seed"] = rows["id"].map(ho["random"]["seed"])
    n_rnd = int(rows["tp_rnd_tps"].notna().sum())
    log(f"random split: {n_rnd} of {len(rows)} rows held out at least once in {args.random_seeds} seeds")

    results: dict[str, Any] = {
        "generated": time.strftime("%Y-%m-%d %H:%M:%S"), "peers_python": args.peers_python,
        "rows": {"reference": len(df), "configured": len(rows),
                 "with_throughput": int(np.isfinite(rows.measured_tokens_per_s).sum()),
                 "with_memory": int(np.isfinite(rows.measured_mem_gib).sum()),
                 "held_out_random": n_rnd, "random_seeds": args.random_seeds},
        "held_out": {"cache_key": ho["key"], "current_key": ho["current_key"], "validate": ho["messages"]},
        "peers": {},
    }
    text: list[str] = []
    tp_cols = {"tuneplan uncal.": "tp_uncal_tps", "tuneplan held-out by-source": "tp_src_tps",
               "tuneplan held-out random": "tp_rnd_tps"}
    tp_mem_cols = {"tuneplan uncal.": "tp_uncal_mem", "tuneplan held-out by-source": "tp_src_mem",
                   "tuneplan held-out random": "tp_rnd_mem"}

    if "kavier" in peers:
        cat = run_shim(args.peers_python, KAVIER_SHIM, {"rows": []})
        req, why, stand_in = kavier_request(rows, cat)
        t0 = time.time()
        kv = run_shim(args.peers_python, KAVIER_SHIM, {"rows": req})
        log(f"kavier {kv['version']}: {len(req)} rows predicted in {time.time() - t0:.1f} s, {len(why)} not supported")
        pred = {r["id"]: r for r in kv["rows"]}
        for r in kv["rows"]:
            if "error" in r:
                why[r["id"]] = "kavier error: " + r["error"].split("\n")[0][:120]
        rows["kv_tps"] = rows["id"].map(lambda i: pred.get(i, {}).get("tokens_per_s", np.nan)).astype(float)
        rows["kv_raw_tps"] = rows["id"].map(lambda i: pred.get(i, {}).get("tokens_per_s_raw", np.nan)).astype(float)
        cols = {"kavier (shipped calibration)": "kv_tps", "kavier raw physics": "kv_raw_tps", **tp_cols}
        has_thr = np.isfinite(rows.measured_tokens_per_s)
        tab = comparison(rows, "measured_tokens_per_s", cols,
                         extra_groups=[("ALL but llmftbench", lambda f: f["source"] != "llmftbench"),
                                       ("ALL, <= 8 GPUs", lambda f: f["gpus"] <= 8)])
        cov = coverage(rows, "measured_tokens_per_s", ["kv_tps"], tp_cols)
        wide, wide_txt = wider(rows, "measured_tokens_per_s", cols)
        text.append(fmt_table(tab, f"kavier {kv['version']} - throughput MdAPE % (rows both predict; "
                                   "kavier's calibration is in-sample on llmftbench)")
                    + coverage_text(cov, "throughput") + wide_txt)
        sup = rows["id"].isin([r["id"] for r in req])
        results["peers"]["kavier"] = {
            "version": kv["version"], "catalog": {k: cat[k] for k in ("models", "gpus", "methods")},
            "calibration": {k: kv[k] for k in ("calibrated_models", "calibrated_gpus", "calibrated_gpu_counts")},
            "throughput": tab, "coverage": cov, "throughput_without_random": wide,
            "supported_rows_with_throughput": int((sup & has_thr).sum()),
            "not_supported_with_throughput": reason_counts({i: w for i, w in why.items()
                                                            if i in set(rows.loc[has_thr, "id"])}, rows),
            "not_supported_ids": why,
            "same_architecture_stand_ins": sorted(i for i, s in stand_in.items() if s),
            "in_calibration_rows": sorted(r["id"] for r in kv["rows"] if r.get("in_calibration", {}).get("cell")),
        }

    if "llm-analysis" in peers:
        cat = run_shim(args.peers_python, LLMA_SHIM, {"rows": []})
        req, why, mem_only = llma_request(rows, ts, set(cat["gpus"]))
        t0 = time.time()
        la = run_shim(args.peers_python, LLMA_SHIM, {"rows": req})
        log(f"llm-analysis {la['version']}: {len(req)} rows in {time.time() - t0:.1f} s, {len(why)} not supported")
        params_tp = {r["id"]: r["params_tuneplan"] for r in req}
        pred = {}
        for r in la["rows"]:
            if "error" in r:
                why[r["id"]] = "llm-analysis error: " + r["error"].split("\n")[0][:120]
                continue
            # its own parameter count (it assumes tied embeddings): kept, and listed when far off
            r["params_ratio"] = r["params_total"] / params_tp[r["id"]]
            pred[r["id"]] = r
        for e in LLMA_EFFICIENCIES:
            rows[f"la_tps@{e}"] = rows["id"].map(
                lambda i, e=e: np.nan if i in mem_only else pred.get(i, {}).get(f"tokens_per_s@{e}", np.nan)).astype(float)
        rows["la_mem"] = rows["id"].map(lambda i: pred.get(i, {}).get("mem_gib", np.nan)).astype(float)
        cols = {f"llm-analysis eff={e:g}" + (" (default)" if e == 1.0 else ""): f"la_tps@{e}" for e in LLMA_EFFICIENCIES}
        thr_tab = comparison(rows, "measured_tokens_per_s", {**cols, **tp_cols})
        mem_tab = comparison(rows, "measured_mem_gib", {"llm-analysis": "la_mem", **tp_mem_cols})
        cov_t = coverage(rows, "measured_tokens_per_s", list(cols.values()), tp_cols)
        cov_m = coverage(rows, "measured_mem_gib", ["la_mem"], tp_mem_cols)
        wide_t, wide_t_txt = wider(rows, "measured_tokens_per_s", {**cols, **tp_cols})
        wide_m, wide_m_txt = wider(rows, "measured_mem_gib", {"llm-analysis": "la_mem", **tp_mem_cols})
        text.append(fmt_table(thr_tab, f"llm-analysis {la['version']} - throughput MdAPE % (rows both predict)")
                    + coverage_text(cov_t, "throughput") + wide_t_txt)
        text.append(fmt_table(mem_tab, f"llm-analysis {la['version']} - peak memory MdAPE % (rows both predict)")
                    + coverage_text(cov_m, "peak memory") + wide_m_txt)
        has_thr = np.isfinite(rows.measured_tokens_per_s)
        has_mem = np.isfinite(rows.measured_mem_gib)
        why_thr = {**why, **{i: w for i, w in mem_only.items() if i not in why}}
        ids_thr, ids_mem = set(rows.loc[has_thr, "id"]), set(rows.loc[has_mem, "id"])
        results["peers"]["llm-analysis"] = {
            "version": la["version"], "catalog_gpus": cat["gpus"], "efficiencies": list(LLMA_EFFICIENCIES),
            "throughput": thr_tab, "memory": mem_tab, "coverage_throughput": cov_t, "coverage_memory": cov_m,
            "throughput_without_random": wide_t, "memory_without_random": wide_m,
            "not_supported_throughput": reason_counts({i: w for i, w in why_thr.items() if i in ids_thr}, rows),
            "not_supported_memory": reason_counts({i: w for i, w in why.items() if i in ids_mem}, rows),
            "not_supported_ids": why, "memory_only_ids": mem_only,
            "params_ratio_off": {r["id"]: round(r["params_ratio"], 3) for r in la["rows"]
                                 if "params_ratio" in r and abs(r["params_ratio"] - 1) > LLMA_PARAM_TOLERANCE},
        }

    if "coastline" in peers:
        try:
            cmp = coastline_compare(args.peers_python, rows, log)
            results["peers"]["coastline"] = cmp
            text.append(coastline_text(cmp))
        except Exception as exc:  # one peer failing must not lose the others
            results["peers"]["coastline"] = {"error": f"{type(exc).__name__}: {exc}"}
            text.append(f"coastline: {type(exc).__name__}: {exc}\n")

    # not-supported summaries
    for name in ("kavier", "llm-analysis"):
        p = results["peers"].get(name)
        if not p:
            continue
        key = "not_supported_with_throughput" if name == "kavier" else "not_supported_throughput"
        lines = [f"{name}: rows with measured throughput it cannot take"]
        lines += [f"  {d['rows']:4d}  {d['reason']}" for d in p[key]]
        if name == "llm-analysis":
            lines.append(f"{name}: rows with measured peak memory it cannot take")
            lines += [f"  {d['rows']:4d}  {d['reason']}" for d in p["not_supported_memory"]]
        text.append("\n".join(lines) + "\n")

    keep = ["id", "source", "model", "model_resolved", "gpu", "method", "gpus", "nodes", "tp", "pp", "sharding",
            "micro_batch", "grad_accum", "seq_len", "measured_tokens_per_s", "measured_mem_gib", "mem_kind"]
    pred_cols = [c for c in rows.columns if c.startswith(("tp_", "kv_", "la_"))]
    results["predictions"] = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                               for k, v in r.items()} for r in rows[keep + pred_cols].to_dict("records")]
    results["seconds"] = round(time.time() - t_start, 1)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, default=str))
    if args.markdown:
        Path(args.markdown).write_text(markdown(results))
    print("\n".join(text))
    print(f"results: {out} ({results['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
