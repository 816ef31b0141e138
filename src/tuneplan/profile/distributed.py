"""Data-parallel measurements: `--nproc N` runs N processes with torchrun (gloo on CPU, nccl on CUDA), each
holding the model under DDP or FSDP2; comm_share from steps with gradient synchronisation switched off
(docs/profiling.md).

Usage (internal): python -m torch.distributed.run --standalone --nproc_per_node N \
    -m tuneplan.profile.distributed CONFIG_JSON MODEL_CONFIG_JSON RESULT_JSON
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from tuneplan.profile.config import ModelSource, ProfileConfig


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
    lists = (m for m in model.modules() if isinstance(m, torch.nn.ModuleList))
    return layers or list(max(lists, key=len, default=[]))  # else the longest ModuleList


def worker_main(cfg_path: str, src_path: str, res_path: str) -> int:
    import torch
    import torch.distributed as dist

    from tuneplan.profile.device import sync
    from tuneplan.profile.memory import is_oom
    from tuneplan.profile.runner import DistContext, Measured, _measure, failure_row, result_row

    cfg = ProfileConfig.from_json(Path(cfg_path).read_text(encoding="utf-8"))
    src = ModelSource(**json.loads(Path(src_path).read_text(encoding="utf-8")))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
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
            sync(device)
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            sync(device)
            if i:
                times.append(time.perf_counter() - t0)
        del buf
        return statistics.median(times)

    ctx = DistContext(rank=rank, wrap=wrap, no_sync=no_sync,
                      max_over_ranks=max_over_ranks, allreduce_time=allreduce_time)
    m = Measured()
    try:
        _measure(cfg, src, device, ctx, m)
        row = result_row(cfg, src, cfg.device, m)
    except Exception as exc:  # noqa: BLE001 - recorded as a row; the launcher reads it
        row = failure_row(cfg, src, cfg.device, exc, is_oom(exc), m.build)
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
