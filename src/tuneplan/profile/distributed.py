"""Data-parallel measurements: `--nproc N` runs N processes with torchrun (gloo on CPU, nccl on CUDA),
each holding the model under DDP or FSDP (FSDP2 `fully_shard`, one unit per decoder layer).

Communication share: the timed steps are run twice, normally and with gradient synchronisation
switched off (DDP `no_sync`, FSDP `set_requires_gradient_sync(False)`); comm_share =
1 - median(no-sync step) / median(step), the share of the step spent in exposed gradient
communication. `allreduce_s` also times a standalone all-reduce of one gradient's worth of numbers.

Usage (internal): python -m torch.distributed.run --standalone --nproc_per_node N \
    -m tuneplan.profile.distributed CONFIG_JSON RESULT_JSON
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from tuneplan.profile.config import ModelSource, ProfileConfig
from tuneplan.profile.memory import cpu_count


def _src_path() -> str:
    """The folder holding the tuneplan package (so the workers import this same copy)."""
    return str(Path(__file__).resolve().parents[2])


def launch(cfg: ProfileConfig, src: ModelSource, device: str) -> dict[str, Any]:
    """Run one configuration under torchrun; returns the row written by rank 0 (or a failure row)."""
    from tuneplan.profile.runner import config_row

    with tempfile.TemporaryDirectory(prefix="tuneplan-dist-") as tmp:
        cfg_path = Path(tmp) / "config.json"
        res_path = Path(tmp) / "result.json"
        src_path = Path(tmp) / "model_config.json"
        src_path.write_text(json.dumps({"name": src.name, "hf_id": src.hf_id, "config": src.config,
                                        "origin": src.origin}), encoding="utf-8")
        cfg_path.write_text(cfg.to_json(), encoding="utf-8")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_src_path(), env.get("PYTHONPATH", "")) if p)
        threads = cfg.threads or max(1, cpu_count() // cfg.nproc)
        if not device.startswith("cuda"):
            env["OMP_NUM_THREADS"] = str(threads)
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={cfg.nproc}", "-m", "tuneplan.profile.distributed",
               str(cfg_path), str(src_path), str(res_path)]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=cfg.timeout_s)
            rc, log = proc.returncode, (proc.stdout or "") + (proc.stderr or "")
        except subprocess.TimeoutExpired as exc:
            rc, log = -1, f"torchrun timed out after {cfg.timeout_s:g} s " + str(exc.stderr or "")[-500:]
        if res_path.exists():
            return json.loads(res_path.read_text(encoding="utf-8"))
        row = config_row(cfg, src, device)
        lines = [ln for ln in log.splitlines() if ln.strip() and "warn" not in ln.lower()]
        tail = " | ".join(lines[-3:])[-280:]
        row.update({"status": "error", "error": f"torchrun exit {rc}: {tail}"})
        return row


@contextlib.contextmanager
def _fsdp_no_sync(model: Any) -> Iterator[None]:
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def _decoder_layers(model: Any) -> list[Any]:
    import torch

    names = set(getattr(getattr(model, "base_model", model), "_no_split_modules", None) or [])
    inner = model
    for _ in range(3):
        names |= set(getattr(inner, "_no_split_modules", None) or [])
        inner = getattr(inner, "model", inner)
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if layers:
        return layers
    best: list[Any] = []
    for m in model.modules():
        if isinstance(m, torch.nn.ModuleList) and len(m) > len(best):
            best = list(m)
    return best


def worker_main(cfg_path: str, src_path: str, res_path: str) -> int:
    import torch
    import torch.distributed as dist

    from tuneplan.profile.memory import is_oom
    from tuneplan.profile.runner import (
        DistContext,
        Measured,
        _measure,
        failure_row,
        result_row,
    )

    cfg = ProfileConfig.from_json(Path(cfg_path).read_text(encoding="utf-8"))
    s = json.loads(Path(src_path).read_text(encoding="utf-8"))
    src = ModelSource(s["name"], s["hf_id"], s["config"], s["origin"])
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    cuda = cfg.device.startswith("cuda")
    device = f"cuda:{local}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=max(60, cfg.timeout_s / 2)))
    if cfg.threads and not cuda:
        torch.set_num_threads(cfg.threads)
    sharding = cfg.effective_sharding

    def wrap(model: Any) -> Any:
        if sharding == "fsdp":
            from torch.distributed.fsdp import fully_shard

            for layer in _decoder_layers(model):
                fully_shard(layer)
            fully_shard(model)
            return model
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(model, device_ids=[local] if cuda else None)

    def no_sync(model: Any) -> contextlib.AbstractContextManager[Any]:
        return _fsdp_no_sync(model) if sharding == "fsdp" else model.no_sync()

    def max_over_ranks(xs: list[float]) -> list[float]:
        if not xs:
            return xs
        t = torch.tensor(xs, dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return [float(v) for v in t.cpu().tolist()]

    def allreduce_time(numel: int, dtype: Any) -> float:
        buf = torch.ones(max(1, numel), dtype=dtype, device=device)
        times = []
        for i in range(4):
            dist.barrier()
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            if cuda:
                torch.cuda.synchronize()
            if i:
                times.append(time.perf_counter() - t0)
        del buf
        return statistics.median(times)

    ctx = DistContext(rank=rank, world=world, sharding=sharding, wrap=wrap, no_sync=no_sync,
                      max_over_ranks=max_over_ranks, allreduce_time=allreduce_time)
    run_cfg = cfg
    m = Measured()
    try:
        _measure(run_cfg, src, device, ctx, m)
        row = result_row(run_cfg, src, cfg.device, m)
    except Exception as exc:  # noqa: BLE001 - recorded as a row; the launcher reads it
        row = failure_row(run_cfg, src, cfg.device, exc, is_oom(exc), m.build)
    row["threads"] = torch.get_num_threads()
    if rank == 0 or row.get("status") != "ok":
        path = Path(res_path)
        if rank == 0 or not path.exists():
            tmp = path.with_suffix(f".rank{rank}.tmp")
            tmp.write_text(json.dumps(row, default=str), encoding="utf-8")
            os.replace(tmp, path)
    if row.get("status") != "ok":
        # exit non-zero so torchrun stops the other ranks (they may wait in a collective)
        return 3
    with contextlib.suppress(Exception):
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(worker_main(*sys.argv[1:4]))
