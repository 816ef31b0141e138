"""`tuneplan plan`'s own options (what it searches and the question it answers), declared once: the
CLI flags (commands/plan.py), the web request model (web/schemas.py `PlanRequest`) and the workload
file's columns (plan/batch.py) are generated from PLAN_OPTIONS. The job's options come from JobSpec
(specs/job.py `option`); those it declares with `axis=` are the searched ones, pinned here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tuneplan.plan.objectives import OBJECTIVES
from tuneplan.plan.units import parse_duration, parse_money
from tuneplan.specs.job import METHODS, SHARDINGS

MAX_COUNT = 1_048_576
"""Largest GPU count, micro-batch, gradient accumulation or global batch a web request may give."""


@dataclass(frozen=True)
class PlanOption:
    """One option of `tuneplan plan`. `kind`: `names` (a list of names; `choices` bound them in a web
    request, the planner checks them on the command line), `ints` (a list of positive integers), `int`
    (a positive integer), `hours` (a positive number of hours), `duration` (12h, 90min...), `money`
    ($400), `choice` (one of `choices`) or `bool` (on/off; absent: both are searched). `flags`: the
    CLI flag and its aliases (default --name; a workload column is named as any of them), `hidden`:
    aliases left out of --help; `default`: its default (also a web request's; None: the planner's);
    `key`: its `plan_run` keyword (default: the name); `web`: its request field ("": the name, None:
    no field), `upper` and `most` its bounds there (value, list length); `column`: a workload file
    column."""

    name: str
    kind: str
    help: str
    group: str = "search"
    default: Any = None
    flags: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()
    key: str = ""
    web: str | None = ""
    upper: float = MAX_COUNT
    most: int = 10_000
    column: bool = False

    @property
    def flag(self) -> str:
        return self.flags[0] if self.flags else "--" + self.name.replace("_", "-")

    @property
    def field(self) -> str | None:
        """Its web request field."""
        return self.name if self.web == "" else self.web

    def value(self, v: Any) -> Any:
        """The `plan_run` value of a given value: a duration or amount read, hours in seconds, a
        pinned switch as the one value searched."""
        return {"duration": parse_duration, "money": parse_money, "hours": lambda h: float(h) * 3600.0,
                "bool": lambda b: (b,)}.get(self.kind, lambda x: x)(v)


PLAN_OPTIONS = (
    PlanOption("gpus", "names", "GPU types, comma-separated (default: every GPU the price file prices), e.g. "
               "A100-SXM4-80GB,H100-SXM5-80GB,L40S-48GB", most=256, column=True),
    PlanOption("methods", "names", f"methods, comma-separated (default full,lora,qlora; any of {','.join(METHODS)})",
               hidden=("--method",), choices=METHODS, most=64, column=True),
    PlanOption("max_gpus", "int", "largest GPU count (powers of two up to it; default 8)", default=8,
               column=True),
    PlanOption("gpu_counts", "ints", "GPU counts to try instead of powers of two", key="gpu_counts_"),
    PlanOption("gpus_per_node", "int", "GPUs per node (default 8)", upper=1024),
    PlanOption("micro_batches", "ints", "micro-batches to try (default 1,2,4,...,64)"),
    PlanOption("micro_batch", "int", "pin the micro-batch", web=None),
    PlanOption("global_batch", "int", "samples per optimizer step kept by gradient accumulation (default 32)",
               column=True),
    PlanOption("grad_accums", "ints", "gradient-accumulation steps to try instead of keeping --global-batch"),
    PlanOption("grad_accum", "int", "pin the gradient accumulation", web=None),
    PlanOption("shardings", "names", f"shardings for >1 GPU (default ddp,fsdp; any of {','.join(SHARDINGS)})",
               choices=SHARDINGS, most=64),
    PlanOption("sharding", "choice", "pin the sharding", choices=SHARDINGS, web=None),
    PlanOption("grad_ckpt", "bool", "pin gradient checkpointing on/off (default: try both)"),
    PlanOption("deadline", "duration", "wall-clock limit: 12h, 90min, 1h30m, 2d (a bare number is hours)",
               "the question", key="deadline_s", web=None, column=True),
    PlanOption("deadline_h", "hours", "wall-clock limit in hours", "the question", key="deadline_s", upper=1e6,
               column=True),
    PlanOption("budget", "money", "cost limit in $ (e.g. 400)", "the question", flags=("--budget", "--budget-usd"),
               key="budget_usd", web="budget_usd", upper=1e12, column=True),
    PlanOption("objective", "choice", "cheapest (default), fastest, energy, or balanced (smallest time x cost)",
               "the question", default="cheapest", choices=OBJECTIVES, column=True),
)
"""`tuneplan plan`'s options, in --help order (groups: search, the question)."""


def plan_options(group: str | None = None) -> dict[str, PlanOption]:
    """The plan options (of one --help group) by name."""
    return {o.name: o for o in PLAN_OPTIONS if group in (None, o.group)}


def plan_values(given: dict[str, Any]) -> dict[str, Any]:
    """`plan_run` keyword arguments of the options given {name: value} (None: not given)."""
    opts = plan_options()
    return {opts[n].key or n: opts[n].value(v) for n, v in given.items() if v is not None}
