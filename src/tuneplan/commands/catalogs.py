"""`tuneplan models`, `tuneplan gpus` and `tuneplan frameworks`."""

from __future__ import annotations

import argparse
import sys

from tuneplan.commands.common import print_json, rich_table


def register(sub) -> None:
    m = sub.add_parser("models", help="list the model catalog")
    m.add_argument("--json", action="store_true")
    m.add_argument("--search", help="only names containing this text")
    m.set_defaults(func=run_models)
    g = sub.add_parser("gpus", help="list the GPU catalog")
    g.add_argument("--json", action="store_true")
    g.set_defaults(func=run_gpus)
    f = sub.add_parser("frameworks", help="list the framework profiles (data/frameworks.yaml)",
                       description="The training frameworks' profiles: the defaults each sets that change time or "
                                   "memory, its aliases and versioned rules; --json gives every value's source.")
    f.add_argument("name", nargs="?", help="one profile (NAME, an alias or NAME@VERSION): every value with its source")
    f.add_argument("--json", action="store_true")
    f.set_defaults(func=run_frameworks)


def run_models(args: argparse.Namespace) -> int:
    from tuneplan.specs.catalog import list_models

    models = list_models()
    if args.search:
        models = [m for m in models if args.search.lower() in m.name.lower()]
    if args.json:
        return print_json([m.to_dict() for m in models])
    title = f"{len(models)} models (parameters computed from config.json)"
    rows = [(m.name, m.model_type, f"{m.params_total / 1e9:.2f} B", f"{m.params_active / 1e9:.2f} B" if m.is_moe else "",
             str(m.n_layers), str(m.hidden_size), f"{m.n_heads}/{m.n_kv_heads}", f"{m.vocab_size:,}") for m in models]
    print_catalog(title, MODEL_COLUMNS, rows)
    return 0


MODEL_COLUMNS = (("name", "left"), ("type", "left"), ("params", "right"), ("active", "right"),
                 ("layers", "right"), ("hidden", "right"), ("heads/kv", "right"), ("vocab", "right"))


def print_catalog(title: str, columns: tuple[tuple[str, str], ...], rows: list[tuple[str, ...]]) -> None:
    """A catalog's table: rich on a terminal; plain aligned text, every cell whole, for a pipe or a file."""
    if not sys.stdout.isatty():
        print(title)
        print(plain_table(columns, rows))
        return
    from tuneplan.report.tables import report_console

    report_console().print(rich_table(title, columns, rows))


def plain_table(columns: tuple[tuple[str, str], ...], rows: list[tuple[str, ...]]) -> str:
    """Columns aligned with spaces, every cell whole (for pipes, grep and files)."""
    table = [tuple(c for c, _ in columns), *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(columns))]
    return "\n".join("  ".join(cell.ljust(w) if j == "left" else cell.rjust(w)
                               for cell, w, (_, j) in zip(r, widths, columns, strict=True)).rstrip() for r in table)


def run_gpus(args: argparse.Namespace) -> int:
    from tuneplan.specs.gpu import gpu_catalog, user_gpus

    gpus = {**gpu_catalog(), **user_gpus()}
    if args.json:
        return print_json([g.to_dict() for g in gpus.values()])
    title = (f"{len(gpus)} GPUs (dense peak TFLOP/s, no sparsity; -: the part has none; ?: no source gives it, "
             "* taken from a sibling part; sources: --json)")
    cols = ("name", "memory", "bandwidth", "bf16", "fp8", "fp4", "intra-node", "inter-node", "TDP")
    rows = [(g.name, f"{g.memory_gib:g} GiB", _fig(g, "memory_bandwidth_gbs", f"{g.memory_bandwidth_gbs:,.0f} GB/s"),
             *(_fig(g, f"{p}_tflops", f"{g.peak_tflops[p]:g}" if p in g.peak_tflops else "") for p in
               ("bf16", "fp8", "fp4")),
             _fig(g, "intra_node_gbs_bidir", f"{g.intra_node_gbs:g} GB/s" if g.intra_node_gbs else ""),
             f"{g.inter_node_gbps:g} Gb/s" if g.inter_node_gbps else "-",
             _fig(g, "tdp_w", f"{g.tdp_w:g} W" if g.tdp_w else "")) for g in gpus.values()]
    print_catalog(title, tuple((c, "left" if c == "name" else "right") for c in cols), rows)
    from tuneplan.specs.gpu import gpu_families

    fams = gpu_families()
    print("Family names read as a default variant (said in the output; --strict-names refuses them): "
          + "; ".join(f"{f.name} -> {f.default}" for f in fams.values()))
    return 0


def _fig(g, column: str, text: str) -> str:
    """A figure for the table: '*' when taken from a sibling part, '?' when no source gives it, '-' absent."""
    from tuneplan.specs.gpu import missing_columns

    if column in g.filled:
        return f"{text}*"
    if text:
        return text
    return "?" if column in missing_columns(g) else "-"


FRAMEWORK_COLUMNS = (("name", "left"), ("aliases", "left"), ("version", "left"), ("ckpt", "left"),
                     ("master", "left"), ("optimizer", "left"), ("data", "left"), ("attention", "left"),
                     ("loss", "left"), ("MoE experts", "left"), ("FSDP accumulation", "left"))


def framework_dict(fw) -> dict:
    """A profile's values, sources, aliases and version rules (`tuneplan frameworks --json`)."""
    from tuneplan.specs.framework import framework_version_rules

    skip = {"sources", "match", "changed", "aliases", "versions"}
    d = {k: getattr(fw, k) for k in type(fw).__dataclass_fields__ if k not in skip}
    d.update(aliases=list(fw.aliases), matches=list(fw.match), changed_by_version=list(fw.changed),
             versions=framework_version_rules(fw.name), sources=dict(fw.sources))
    return d


def _framework_row(fw) -> tuple[str, ...]:
    ckpt = {True: "on", False: "off", None: "-"}[fw.grad_ckpt]
    return (fw.name, ", ".join(fw.aliases), (f"{fw.version_of} {fw.version or fw.current}" if fw.version_of else ""),
            ckpt, fw.master_weights, fw.optimizer_impl + (", ZeRO-1" if fw.distributed_optimizer else ""),
            "packed" if fw.packing else f"padded to {fw.padding}", fw.attention,
            fw.cross_entropy + (f" ({fw.cp_cross_entropy} under cp)" if fw.cp_cross_entropy else ""), fw.moe_experts,
            fw.grad_accum_sync)


def run_frameworks(args: argparse.Namespace) -> int:
    from tuneplan.specs.framework import get_framework, load_frameworks

    profiles = [get_framework(args.name)] if args.name else list(load_frameworks().values())
    if args.json:
        return print_json([framework_dict(fw) for fw in profiles])
    if args.name:
        fw = profiles[0]
        print(fw.summary())
        d = framework_dict(fw)
        for k, v in d.items():
            if k not in ("sources", "versions", "name"):
                print(f"  {k}: {v}")
        for rule in d["versions"]:
            print(f"  before {fw.version_of} {rule['before']}: " + ", ".join(
                f"{k}={v}" for k, v in rule.items() if k not in ("before", "sources")))
        print("sources:")
        for k, v in fw.sources.items():
            print(f"  {k}: {v}")
        return 0
    title = (f"{len(profiles)} framework profiles (--framework NAME[@VERSION]; every value's source: "
             "tuneplan frameworks NAME or --json; ckpt -: the framework leaves it to the user, off)")
    rows = [_framework_row(fw) for fw in profiles]
    print_catalog(title, FRAMEWORK_COLUMNS, rows)
    return 0
