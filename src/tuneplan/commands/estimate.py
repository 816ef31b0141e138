"""`tuneplan estimate`."""

from __future__ import annotations

import argparse

from tuneplan.commands.common import (
    add_data_args,
    add_gpu_args,
    add_job_args,
    check_interval,
    job_kwargs,
    positive_float,
    print_json,
    read_data,
    single_threaded_blas,
)
from tuneplan.commands.from_config import add_from_args, apply_from, print_provenance
from tuneplan.errors import InputError


def register(sub) -> None:
    p = sub.add_parser("estimate", help="time, throughput, memory, cost and energy of a fine-tuning run",
                       description="Estimate one fine-tuning run. Every figure has its unit and the "
                                   "list of what it assumes.")
    p.add_argument("--model", help="catalog name or Hugging Face id, or a config.json (or folder)")
    p.add_argument("--estimator", default="tuneplan", help="tuneplan (default), kavier, xia, planner, slst")
    p.add_argument("--calibration", help="calibration file or name (default: the shipped one)")
    p.add_argument("--interval", type=float, default=0.8, help="interval coverage (default 0.8; 0 for none)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", help="write the step-time and memory breakdown plot (PNG or SVG)")
    add_gpu_args(p)
    add_job_args(p)
    add_data_args(p)
    add_from_args(p)
    s = p.add_argument_group("Run Planner seed inputs (with --estimator planner)")
    s.add_argument("--params", type=positive_float, help="model parameters (total; MoE: active)")
    s.add_argument("--flops-per-param-token", type=positive_float, help="6 full, ~4 LoRA")
    s.add_argument("--mfu", type=positive_float, help="model FLOPs utilisation (default 0.4)")
    s.add_argument("--bytes-per-param", type=positive_float, help="16 full Adam, ~2 LoRA")
    p.set_defaults(func=run)


def _planner_seed(args: argparse.Namespace) -> int:
    from tuneplan.estimators.planner import (
        BYTES_PER_PARAM,
        DEFAULT_MFU,
        FLOPS_PER_PARAM_TOKEN,
        planner_numbers,
    )
    from tuneplan.specs.limits import check_finite_figures, check_planner_inputs

    check_planner_inputs(args)
    method = args.method or "full"
    fam = "full" if method in ("full", "freeze") else "lora"
    for name in ("examples", "tokens_per_example"):
        if getattr(args, name) is None and args.tokens is None:
            raise InputError(name.replace("_", "-"), "is needed by the planner")
    if args.peak_tflops is None:
        raise InputError("peak-tflops", "is needed by the planner with --params")
    tokens = (args.tokens if args.tokens else args.examples * args.tokens_per_example) * (args.epochs or 1.0)
    gpus = args.gpus or 1
    mem = args.memory_gib if args.memory_gib is not None else 80.0
    n = planner_numbers(params=args.params, tokens=tokens,
                        flops_per_param_token=args.flops_per_param_token or FLOPS_PER_PARAM_TOKEN[fam],
                        peak_tflops=args.peak_tflops, mfu=args.mfu or DEFAULT_MFU, devices=gpus,
                        rate=args.rate, bytes_per_param=args.bytes_per_param or BYTES_PER_PARAM[fam],
                        memory_gib=mem)
    from tuneplan.estimators.planner import PlannerEstimator

    samples = (args.examples or tokens / (args.tokens_per_example or 1.0)) * (args.epochs or 1.0)
    out = {
        "estimator": "planner", "wall_clock_s": n["wall_clock_s"], "wall_clock_h": n["wall_clock_s"] / 3600.0,
        "device_hours": n["device_hours"], "cost_usd": n["cost_usd"], "energy_kwh": None,
        "tokens_per_s": n["tokens_per_s"], "samples_per_s": samples / n["wall_clock_s"], "step_time_s": None,
        "memory_per_gpu_gib": n["memory_per_device_gib"], "memory_total_gib": n["memory_total_gib"],
        "fits": bool(n["fits"]), "tokens_total": n["tokens"], "total_flops": n["total_flops"],
        "per_device_flops_per_s": n["per_device_flops"], "cluster_flops_per_s": n["cluster_flops"],
        "assumptions": PlannerEstimator(mfu=args.mfu or DEFAULT_MFU).assumptions()
        + ["Energy is not part of the seed calculator (no power figure given)."],
    }
    check_finite_figures(out, "planner estimate")
    if args.json:
        return print_json(out)
    cost = "-" if n["cost_usd"] is None else f"${n['cost_usd']:,.2f}"
    lines = [
        f"Training tokens — examples × tokens × epochs: {n['tokens']:,.0f}",
        f"Total FLOPs — factor × params × tokens: {n['total_flops']:.2e} FLOP",
        f"Per device, after utilisation: {n['per_device_flops']:.2e} FLOP/s",
        f"Across the cluster: {n['cluster_flops']:.2e} FLOP/s",
        f"Wall clock: {n['wall_clock_s'] / 3600:.1f} h",
        f"Device-hours: {n['device_hours']:.1f}",
        f"Cost at the rate above: {cost}",
        f"Training throughput: {n['tokens_per_s']:,.0f} tokens/s",
        f"Weights and optimiser state, total: {n['memory_total_gib']:.2f} GiB",
        f"Per device, sharded evenly: {n['memory_per_device_gib']:.2f} GiB",
        f"Fits the VRAM entered: {'yes' if n['fits'] else 'no'}, before activations",
        "",
        "What this assumes:",
    ] + [f"  - {a}" for a in out["assumptions"]]
    print("\n".join(lines))
    return 0


def run(args: argparse.Namespace) -> int:
    single_threaded_blas()
    cfg = apply_from(args)
    if args.estimator == "planner" and args.params is not None:
        return _planner_seed(args)
    if args.params is not None:
        raise InputError("params", "is a Run Planner input: use it with --estimator planner "
                         "(other estimators compute parameters from --model)")
    if not args.model:
        raise InputError("model", "is required (a catalog name, Hugging Face id, or config.json path; or "
                         "--from your training config)")
    check_interval(args.interval)
    from tuneplan.api import estimate

    ekw = dict(estimator=args.estimator, calibration=args.calibration, gpu_file=args.gpu_file,
               peak_tflops=args.peak_tflops, memory_gib=args.memory_gib, bandwidth_gbs=args.bandwidth_gbs,
               provider=args.provider, prices=args.prices, strict=args.strict_names)
    data = read_data(args)
    if data is not None:
        from tuneplan.integrations.dataset import estimate_with_data

        r = estimate_with_data(args.model, args.gpu, summary=data, group_by_length=args.group_by_length,
                               packing_strategy=args.packing_strategy, interval=args.interval or None,
                               estimate_kwargs=ekw, **job_kwargs(args))
    else:
        r = estimate(args.model, args.gpu, interval=args.interval or None, **ekw, **job_kwargs(args))
    from tuneplan.specs.limits import check_finite_figures

    d = r.to_dict()
    check_finite_figures(d)
    if args.plot:
        from tuneplan.report.plots import plot_estimate

        plot_estimate(r, args.plot)
    if args.json:
        return print_json(d, cfg)
    from tuneplan.report.tables import print_estimate

    print_estimate(r)
    if data is not None:
        print("\n".join(["", *data_lines(r.extra["data"])]))
    if cfg is not None:
        print_provenance(cfg)
    if args.plot:
        print(f"plot written to {args.plot}")
    return 0


def data_lines(d: dict) -> list[str]:
    """The estimate's dataset section: counts, collator, the worst batch's verdict and its fixes."""
    s, c, w = d["summary"], d["collator"], d["worst_batch"]
    lines = [f"Your data: {s['examples']:,} examples, {s['tokens']:,} tokens (mean {s['mean_length']:,.0f}, "
             f"p99 {s['p99_length']:,.0f}, max {s['max_length']:,}); tokens {s['tokens_source']}",
             f"Collator: {c['mode']}, padding waste {c['padding_waste']:.1%} ({c['padded_tokens']:,} tokens computed "
             f"for {c['real_tokens']:,} real)"
             + (f"; {c['examples_cut']:,} example(s) truncated at {c['seq_len']:,}" if c["examples_cut"] else "")
             + f"; per optimizer step {d['per_optimizer_step']['real_tokens']:,.0f} real, "
               f"{d['per_optimizer_step']['padded_tokens']:,.0f} computed tokens",
             "Memory per GPU by batch length: " + ", ".join(
                 f"{k} {w[k]['batch_len']:,} tokens {w[k]['memory_per_gpu_gib']:.1f} GiB" for k in ("median", "p99", "longest"))
             + f" (of {w['memory_capacity_gib']:g})",
             f"Verdict: {w['verdict']}"]
    lines += [f"  fix: {f['change']}: {f['effect']}" for f in w.get("fixes", [])]
    return lines
