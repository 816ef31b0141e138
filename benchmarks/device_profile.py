"""Profile real fine-tuning steps on a lent GPU with tuneplan's profiler, in one call, under a deadline.

Run by hand on the GPU machine (from the repository root, `src/` on the path or tuneplan installed):

    python benchmarks/device_profile.py --out-dir OUT [--deadline 330]

It writes into OUT:
- `device.json`  the device facts (nvidia-smi, driver, CUDA, torch / transformers / peft versions, CPU);
- `probe.yaml`   `tuneplan probe` on the GPU (achievable matmul TFLOP/s per precision, copy bandwidth);
- `runs.csv`     one runs-schema row per configuration (`tuneplan profile`: random weights built on
                 the GPU from the catalog config, synthetic tokens, warm-up then timed optimizer steps),
                 out-of-memory configurations kept as `oom` rows;
- `log.txt`      what ran, what was skipped for lack of time.

The plan is ordered by value (what the reference data lacks most first); an item runs only if its
rough cost fits in the time left, so the call ends inside its limit and every finished row is kept
(rows are flushed as measured). `--smoke` runs a tiny CPU version of the same code path (seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# (label, model, profile_grid keyword arguments, rough seconds on an H200 incl. building the model)
H200_PLAN: list[tuple[str, str, dict[str, Any], float]] = [
    ("8B LoRA", "meta-llama/Llama-3.1-8B",
     {"methods": ["lora"], "seq_lens": [2048], "micro_batches": [1, 4]}, 40),
    ("1B full", "meta-llama/Llama-3.2-1B",
     {"methods": ["full"], "seq_lens": [2048], "micro_batches": [1, 4, 8]}, 35),
    ("8B full", "meta-llama/Llama-3.1-8B",
     {"methods": ["full"], "seq_lens": [2048], "micro_batches": [1, 4]}, 50),
    ("8B DoRA", "meta-llama/Llama-3.1-8B",
     {"methods": ["dora"], "seq_lens": [2048], "micro_batches": [4]}, 30),
    ("Mixtral LoRA", "mistralai/Mixtral-8x7B-v0.1",
     {"methods": ["lora"], "seq_lens": [1024], "micro_batches": [4], "steps": 5}, 90),
    ("0.5B full", "Qwen/Qwen2.5-0.5B",
     {"methods": ["full"], "seq_lens": [1024], "micro_batches": [8, 32]}, 25),
    ("8B LoRA ckpt", "meta-llama/Llama-3.1-8B",
     {"methods": ["lora"], "seq_lens": [2048], "micro_batches": [16], "grad_ckpts": [True]}, 35),
    ("MoE-A2.7B LoRA", "Qwen/Qwen1.5-MoE-A2.7B",
     {"methods": ["lora"], "seq_lens": [1024], "micro_batches": [4], "steps": 5}, 50),
    ("14B LoRA", "Qwen/Qwen2.5-14B",
     {"methods": ["lora"], "seq_lens": [2048], "micro_batches": [2]}, 40),
    ("3B full ckpt", "meta-llama/Llama-3.2-3B",
     {"methods": ["full"], "seq_lens": [2048], "micro_batches": [8], "grad_ckpts": [False, True]}, 40),
    ("8B full OOM", "meta-llama/Llama-3.1-8B",
     {"methods": ["full"], "seq_lens": [4096], "micro_batches": [16]}, 25),
]

# a second call's plan (the first one finished with time to spare): other sizes, shapes, ranks,
# mixed precision (fp32 master weights, as HF Trainer's bf16=True), accumulation, a modern MoE
H200_PLAN_2: list[tuple[str, str, dict[str, Any], float]] = [
    ("1B full amp", "meta-llama/Llama-3.2-1B",
     {"methods": ["full"], "seq_lens": [2048], "micro_batches": [4], "precisions": ["amp-bf16"],
      "grad_accums": [1, 4]}, 30),
    ("8B LoRA shapes", "meta-llama/Llama-3.1-8B",
     {"methods": ["lora"], "seq_lens": [512, 4096], "micro_batches": [2]}, 35),
    ("8B LoRA r64 amp", "meta-llama/Llama-3.1-8B",
     {"methods": ["lora"], "seq_lens": [2048], "micro_batches": [2], "lora_ranks": [64],
      "precisions": ["bf16", "amp-bf16"]}, 40),
    ("8B DoRA mb1", "meta-llama/Llama-3.1-8B",
     {"methods": ["dora"], "seq_lens": [2048], "micro_batches": [1]}, 25),
    ("30B-A3B LoRA", "Qwen/Qwen3-30B-A3B",
     {"methods": ["lora"], "seq_lens": [1024], "micro_batches": [2], "steps": 4}, 60),
    ("7B full", "Qwen/Qwen2.5-7B",
     {"methods": ["full"], "seq_lens": [2048], "micro_batches": [2]}, 30),
    ("3B LoRA", "Qwen/Qwen2.5-3B",
     {"methods": ["lora"], "seq_lens": [2048], "micro_batches": [8]}, 20),
    ("1.5B full", "Qwen/Qwen2.5-1.5B",
     {"methods": ["full"], "seq_lens": [1024], "micro_batches": [16]}, 15),
    ("Mistral LoRA ckpt", "mistralai/Mistral-7B-v0.1",
     {"methods": ["lora"], "seq_lens": [2048], "micro_batches": [8], "grad_ckpts": [True]}, 40),
    ("360M full", "HuggingFaceTB/SmolLM2-360M",
     {"methods": ["full"], "seq_lens": [2048], "micro_batches": [16]}, 15),
]

# a third call: whether the two MoE models that ran out of memory fit smaller batches, mixed
# precision full fine-tuning (fp32 master weights and optimizer states), longer sequences
H200_PLAN_3: list[tuple[str, str, dict[str, Any], float]] = [
    ("Mixtral LoRA small", "mistralai/Mixtral-8x7B-v0.1",
     {"methods": ["lora"], "seq_lens": [256], "micro_batches": [1], "steps": 4}, 45),
    ("30B-A3B LoRA small", "Qwen/Qwen3-30B-A3B",
     {"methods": ["lora"], "seq_lens": [256], "micro_batches": [1], "steps": 4}, 40),
    ("3B full amp", "meta-llama/Llama-3.2-3B",
     {"methods": ["full"], "seq_lens": [2048], "micro_batches": [4], "precisions": ["amp-bf16"]}, 25),
    ("MoE-A2.7B LoRA long", "Qwen/Qwen1.5-MoE-A2.7B",
     {"methods": ["lora"], "seq_lens": [2048], "micro_batches": [4], "steps": 5}, 25),
    ("1B LoRA", "meta-llama/Llama-3.2-1B",
     {"methods": ["lora"], "seq_lens": [2048], "micro_batches": [16]}, 15),
    ("0.5B long", "Qwen/Qwen2.5-0.5B",
     {"methods": ["full"], "seq_lens": [4096], "micro_batches": [8]}, 15),
    ("14B LoRA ckpt", "Qwen/Qwen2.5-14B",
     {"methods": ["lora"], "seq_lens": [2048], "micro_batches": [8], "grad_ckpts": [True], "steps": 4}, 45),
]

# a fourth call: long sequences with checkpointing, attention and optimizer variants, fp32, q,v-only
# LoRA (as several public sources ran it), DoRA on a small model, a newer architecture
H200_PLAN_4: list[tuple[str, str, dict[str, Any], float]] = [
    ("8B LoRA long ckpt", "meta-llama/Llama-3.1-8B",
     {"methods": ["lora"], "seq_lens": [8192, 16384], "micro_batches": [1], "grad_ckpts": [True], "steps": 4}, 40),
    ("1B full eager", "meta-llama/Llama-3.2-1B",
     {"methods": ["full"], "seq_lens": [2048], "micro_batches": [4], "attns": ["eager"]}, 15),
    ("1B full optimizers", "meta-llama/Llama-3.2-1B",
     {"methods": ["full"], "seq_lens": [2048], "micro_batches": [4], "optimizers": ["sgd", "adafactor"]}, 25),
    ("7B LoRA q,v", "Qwen/Qwen2.5-7B",
     {"methods": ["lora"], "seq_lens": [1024], "micro_batches": [8], "lora_targets": "q,v", "lora_ranks": [8]}, 20),
    ("1B DoRA", "meta-llama/Llama-3.2-1B",
     {"methods": ["dora"], "seq_lens": [2048], "micro_batches": [8]}, 15),
    ("Qwen3-8B LoRA", "Qwen/Qwen3-8B",
     {"methods": ["lora"], "seq_lens": [2048], "micro_batches": [4]}, 20),
    ("8B full ckpt long", "meta-llama/Llama-3.1-8B",
     {"methods": ["full"], "seq_lens": [4096], "micro_batches": [8], "grad_ckpts": [True], "steps": 4}, 35),
    ("3B full fp32", "meta-llama/Llama-3.2-3B",
     {"methods": ["full"], "seq_lens": [1024], "micro_batches": [2], "precisions": ["fp32"], "steps": 4}, 30),
]

# the same code path on a CPU in seconds: tiny configs of two catalog architectures
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 512}
SMOKE_PLAN: list[tuple[str, str, dict[str, Any], float]] = [
    ("tiny LoRA", "meta-llama/Llama-3.2-1B",
     {"methods": ["lora", "dora"], "seq_lens": [64], "micro_batches": [2], "layers": [2],
      "config_override": TINY, "steps": 2, "warmup": 1}, 10),
    ("tiny full", "Qwen/Qwen2.5-0.5B",
     {"methods": ["full"], "seq_lens": [64], "micro_batches": [1, 2], "layers": [2],
      "config_override": {**TINY, "num_attention_heads": 4}, "steps": 2, "warmup": 1}, 10),
    ("never fits", "meta-llama/Llama-3.2-1B",
     {"methods": ["full"], "seq_lens": [64], "micro_batches": [1]}, 1e9),
]


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unavailable: {exc}"


def device_facts(device: str) -> dict[str, Any]:
    import torch

    facts: dict[str, Any] = {
        "measured_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cpu_count": os.cpu_count(),
    }
    for mod in ("transformers", "peft", "accelerate"):
        try:
            facts[mod] = __import__(mod).__version__
        except ImportError:
            facts[mod] = None
    try:
        with open("/proc/cpuinfo") as f:
            facts["cpu"] = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        facts["cpu"] = ""
    if device.startswith("cuda"):
        p = torch.cuda.get_device_properties(torch.device(device))
        facts.update({
            "gpu_name": torch.cuda.get_device_name(torch.device(device)),
            "gpu_memory_bytes": p.total_memory,
            "compute_capability": f"{p.major}.{p.minor}",
            "multiprocessors": p.multi_processor_count,
            "nvidia_smi": _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,power.limit,"
                                "power.max_limit,clocks.max.sm,clocks.max.mem,clocks.sm,temperature.gpu,"
                                "pstate,compute_mode,persistence_mode,mig.mode.current",
                                "--format=csv"]),
            "nvidia_smi_topology": _run(["nvidia-smi", "topo", "-m"]),
        })
    return facts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--deadline", type=float, default=330.0, help="seconds for the whole script")
    ap.add_argument("--smoke", action="store_true", help="tiny CPU run of the same code path")
    ap.add_argument("--plan", type=int, default=1, choices=(1, 2, 3, 4), help="which H200 plan (default 1)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    log = (out / "log.txt").open("a", encoding="utf-8")

    def say(msg: str) -> None:
        line = f"[{time.perf_counter() - t0:6.1f}s] {msg}"
        print(line, flush=True)
        log.write(line + "\n")
        log.flush()

    from tuneplan.errors import TuneplanError
    from tuneplan.profile.device import probe, save_entry
    from tuneplan.profile.grid import profile_grid

    device = "cpu" if args.smoke else "cuda"
    plan = SMOKE_PLAN if args.smoke else {1: H200_PLAN, 2: H200_PLAN_2, 3: H200_PLAN_3, 4: H200_PLAN_4}[args.plan]
    facts = device_facts("cuda:0" if device == "cuda" else "cpu")
    (out / "device.json").write_text(json.dumps(facts, indent=1) + "\n", encoding="utf-8")
    say(f"device: {facts.get('gpu_name', facts.get('cpu'))}; torch {facts['torch']}, "
        f"transformers {facts['transformers']}, peft {facts['peft']}")
    entry = probe(device, quick=args.smoke)
    save_entry(entry, out / "probe.yaml")
    say(f"probe: {entry['peak_tflops']} TFLOP/s, copy {entry['memory_bandwidth_gbs']} GB/s")

    runs = out / "runs.csv"
    done = skipped = 0
    for label, model, kw, est in plan:
        left = args.deadline - (time.perf_counter() - t0)
        if est > left:
            say(f"skip {label} ({model}): needs ~{est:.0f} s, {left:.0f} s left")
            skipped += 1
            continue
        t = time.perf_counter()
        opts = {"steps": 8, "warmup": 2, **kw}
        try:
            rows = profile_grid(model, out=runs, device=device, progress=False,
                                echo=lambda s: say("  " + s), **opts)
        except TuneplanError as exc:
            say(f"{label}: {exc}")
            continue
        done += len(rows)
        say(f"{label}: {len(rows)} rows in {time.perf_counter() - t:.0f} s")
    say(f"done: {done} rows, {skipped} items skipped, {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
