"""Uncalibrated physics on the shared RL and preference runs, per source and stage.

Each row with a stage column is read like `validate` reads an SFT row (`read_runs`, with the sources' stated
defaults of data/source_defaults.yaml for empty cells, then `row_to_config`: model, GPU, precision, sharding,
batch shape), then its stage columns go onto the job (`--stage`, `--group-size`,
`--prompts-per-step`, `--completion-len` = the mean when the row gives one (else tuneplan's default for a
cap alone: half the cap, decode to the cap), `--completion-len-max`, `--rollout-engine`, `--rollout-gpus`
when separate, `--rollout-tp`, `--ppo-epochs`,
`--kl-beta` (a row whose reference column says `model` but states no coefficient: verl's default, which
only switches the reference pass on), `--rollout-sleep` for a colocated engine outside TRL / ms-swift,
`--train-steps-per-rollout` = prompts_per_step / global_batch_size (the sources' mini-batch, in prompts);
from the notes, which the schema has no column for: `--off-policy-steps 1` for a separate engine whose run
the notes call async or off-policy (verl fully-async / one-step-off), `--critic-gpus` from NeMo-Aligner's
"Critic Node Count", `--gpu-memory-utilization`, `--max-num-seqs` and AReaL's `ppo_n_minibatches` where the
notes state them); a verl Megatron layout with experts and no etp gets expert tensor parallel 1 (verl's
default, and the only one Megatron-Core accepts for DeepSeek-V3's tp 8 x pp 12 x ep 8 on 96 GPUs)
(Megatron-SWIFT's too: ms-swift 3.12.6 megatron_args.py) and the stage is estimated by `run_stage` with the
prior constants (nothing fitted). An RL row's prompt length is its prompt_len (a cap), or the mean prompt
of realhf's step log where the notes copy it (AReaL v0.1), else seq_len, else verl's default 512 for a verl
row; its seq_len cell, when empty, is filled with it.
A `ppo` row with value_model `none` (critic-free PPO) is costed as `grpo` (the same computation). A `gkd`
row: its completion_len_max (max_new_tokens) as `--completion-len`, its engine, and the teacher its notes
name (`--teacher-model`); one with a separate engine is refused (not modelled).

Printed per source and stage: rows, answered (a prediction came back), n_step (answered rows with a
measured step time), the median |error| of the step time, how many rows that ran (every row here
ran: each is a measurement) are predicted "does not fit", and how many answered rows give only the
completion cap, no mean (the mean taken as half the cap); cover_before / cover: the share of timed rows
whose measured step lies in the 80% step-time interval `tuneplan estimate` gives (the shipped calibration's
width), without / with the range of the mean completion length where the row gives none
(rl_stages.mean_spread). Refused with the reason (not guessed): rows whose
source names no GPU; rows stating no prompts per step, group size or completion length; GRPO-family rows
of a framework whose default is no group (verl's rollout.n 1, OpenRLHF's n_samples_per_prompt 1) that
state no group size; multi-turn tool-calling rollouts (the notes say so: not modelled); NeMo-Aligner rows
stating no layout; rows stating no sequence or prompt length at all (ms-swift's max_length default is the
model's max_model_len: the dataset's own lengths).
`--why` lists the refusals' reasons and the source defaults each answered row took.

`--phases` sets verl's phase timers (gen, old_log_prob, ref, update_actor, from the notes) beside the parts
that cost them.

    python benchmarks/rl_by_source.py [--runs FILE ...] [--why] [--rows] [--phases] [--csv out.csv]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("verl", "trl-docs", "areal", "nemo-aligner", "open-instruct", "skyrl", "ms-swift-examples")
DEFAULT_RUNS = [ROOT.parent / "shared" / "reference" / "runs" / f"{s}.csv" for s in SOURCES]
ENGINES = {"vllm": "vllm", "sglang": "vllm", "trtllm": "vllm", "hf": "hf"}
"""Rollout engines of the runs as tuneplan costs them: paged-KV servers (vLLM, SGLang, TensorRT-LLM) as vLLM."""
NO_DEFAULT_LAYOUT = ("nemo-aligner",)
"""Frameworks with no default tensor / pipeline layout: NeMo-Aligner's PPO actor and critic take it from
the recipe's YAML and the checkpoint (nemo-aligner 0.7.0 sets none in code); a row of theirs that states
no layout is not estimated (a guess would decide whether a 70B fits)."""
VERL_KL_COEF = 0.001
"""KL coefficient of a row whose reference runs but whose coefficient is not stated: verl 0.9.1
trainer/config/_generated_ppo_trainer.yaml actor.kl_loss_coef."""
VERL_PROMPT_LEN = 512
"""Prompt length of a verl row stating neither prompt_len nor seq_len: verl 0.9.1
trainer/config/_generated_ppo_trainer.yaml data.max_prompt_length."""
SLEEP_OFF = ("trl", "swift")
"""Frameworks whose colocated engine stays awake while training by default (TRL vllm_enable_sleep_mode
False, ms-swift on TRL); the others (verl, NeMo RL / Aligner, AReaL, SkyRL) free or sleep it."""


def _num(row: dict, key: str):
    import math

    v = row.get(key)
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def prompt_len(row: dict) -> float | None:
    """The row's prompt length: where the notes copy realhf's (AReaL v0.1's) step log, its mean prompt -
    "Average #tokens per batch" is the dataset's tokens over the steps of an epoch, steps = samples //
    the source call's batch (realhf 0.3.0 system/master_worker.py load_data_func; the samples are the
    prompts), so per prompt it is that over the prompts per step - else the prompt_len cell (a cap)."""
    logged = re.search(r"Average #tokens per batch is (\d+)", str(row.get("notes")))
    per_step = _num(row, "prompts_per_step")
    return round(int(logged.group(1)) / per_step) if logged and per_step else _num(row, "prompt_len")


def sft_row(row: dict) -> dict:
    """The row as `row_to_config` reads an SFT row: its seq_len (else the prompt length) and, for AReaL
    rows whose notes name the release (AReaL v0.1), that release's trainer (data/frameworks.yaml areal@); a
    verl row with a Megatron layout, verl's Megatron strategy (verl-megatron). A stage row stating no length
    at all is refused (a preference pair's length is its dataset's; an RL row outside verl has no default)."""
    from tuneplan.errors import InputError
    from tuneplan.specs.job import RL_STAGES, read_stage

    if read_stage(str(row["stage"]).strip().lower())[0] in RL_STAGES and not any(_num(row, k) for k in (
            "prompts_per_step", "group_size", "completion_len_mean", "completion_len_max")):
        raise InputError("row", "states no prompts per step, group size or completion length: not estimated")
    fw = str(row.get("framework")).strip().lower()
    layout = str(row.get("sharding") or "nan")
    if fw in NO_DEFAULT_LAYOUT and not any(_num(row, k) for k in ("tp", "pp")) and layout in ("", "nan"):
        raise InputError("sharding", f"{fw} has no default layout and the row states none: not estimated")
    sft = dict(row, stage="sft")
    version = re.search(r"AReaL v(\d+\.\d+)", str(row.get("notes")))
    if version and not _num(row, "areal_version"):
        sft["areal_version"] = version.group(1)
    if fw == "verl" and layout != "nan" and "fsdp" not in layout:
        sft["framework"] = "verl-megatron"  # a Megatron layout (tp/pp/ep): verl's Megatron strategy
    megatron = sft["framework"] == "verl-megatron" or (fw == "megatron" and str(row.get("source")).startswith(
        "ms-swift"))
    if megatron and any(p.startswith("ep") for p in layout.split("+")) and "etp" not in layout:
        # expert tensor parallel 1, where Megatron-Core's own default is tp: verl 0.6.0 trainer/config/
        # _generated_ppo_megatron_trainer.yaml, ms-swift 3.12.6 swift/megatron/argument/megatron_args.py
        sft["sharding"] = layout + "+etp1"
    if _num(row, "seq_len") is None:
        verl = str(sft.get("framework")).startswith("verl")
        sft["seq_len"] = prompt_len(row) or (VERL_PROMPT_LEN if verl else None)
        if sft["seq_len"] is None:  # ms-swift: max_length None is the model's max_model_len (3.12.6
            # swift/llm/argument/base_args/base_args.py): no truncation, the dataset's own lengths
            raise InputError("seq_len", "the row states no sequence or prompt length (the run's are its "
                             "dataset's): not estimated (not guessed)")
    return sft


def stage_job(row: dict, cfg) -> tuple:
    """(JobSpec with the row's stage columns, prompt length) of a stage row read as SFT `cfg`."""
    from tuneplan.errors import InputError
    from tuneplan.specs.framework import get_framework
    from tuneplan.specs.job import RL_STAGES, JobSpec, job_fields, read_stage

    stage, _ = read_stage(str(row["stage"]).strip().lower())
    if stage == "ppo" and str(row.get("value_model") or "").strip() == "none":
        stage = "grpo"  # critic-free PPO (AReaL's disable_value): GRPO's computation, no value model
    kw = {k: getattr(cfg.job, k) for k in cfg.job.given}
    kw["stage"] = stage
    prompt = int(prompt_len(row) or cfg.seq_len)
    if stage in RL_STAGES:
        fields = job_fields()
        fw = str(row.get("framework") or row.get("source") or "").lower()
        if re.search(r"multi-turn", str(row.get("notes")), re.I):  # tool calls between the turns of a rollout
            raise InputError("stage", "multi-turn tool-calling rollouts are not modelled: not estimated")
        if stage != "ppo" and not _num(row, "group_size") and any(t in fw for t in ("verl", "openrlhf")):
            # verl's rollout.n default is 1 (verl 0.9.1 trainer/config/_generated_ppo_trainer.yaml), as is
            # OpenRLHF's n_samples_per_prompt: a group whose relative advantage is always zero
            raise InputError("group_size", f"not stated, and {fw}'s default (1 completion per prompt) is no group: "
                             "not estimated")
        if _num(row, "micro_batch_size") is None or "use_dynamic_bsz" in str(row.get("notes")):
            # token-budget micro-batches (verl use_dynamic_bsz, which ignores the micro-batch size, AReaL,
            # NeMo RL): the smallest
            kw["micro_batch"] = 1
        if "verl" in fw and str(row.get("sharding") or "nan").strip() in ("", "nan"):
            kw["sharding"] = "fsdp"  # verl 0.9.1 actor.strategy: fsdp (its Megatron rows state no layout)
            if re.search(r"\bMegatron\b", str(row.get("notes"))) and _num(row, "grad_ckpt") is None:
                # trained by Megatron, its layout not stated (FSDP stands in): the recompute of verl's Megatron
                # strategy (none), not its FSDP default's (data/frameworks.yaml verl-megatron grad_ckpt)
                kw["grad_ckpt"] = bool(get_framework("verl-megatron").job_defaults()["grad_ckpt"])
        elif "verl" in fw and "offload" in str(row.get("sharding")).split("+") and kw.get("sharding") == "ddp":
            # verl's Megatron recipes' offload (the row's '+offload'): optimizer_offload_fraction 1 is Megatron's
            # optimizer_cpu_offload (master weights and moments on the host, the step on the CPU); param and
            # grad offload free the GPUs only between phases (for the engine: --rollout-sleep)
            kw["offload"] = "optimizer"
        mean, cap = _num(row, "completion_len_mean"), _num(row, "completion_len_max")
        eng = ENGINES.get(str(row.get("rollout_engine") or "hf").strip().lower(), "hf")
        opt = {"group_size": _num(row, "group_size"), "prompts_per_step": _num(row, "prompts_per_step"),
               "completion_len": mean, "ppo_epochs": _num(row, "ppo_epochs") if stage == "ppo" else None,
               "kl_beta": _num(row, "kl_beta")}
        if cap and (not mean or cap > mean):  # cap only: tuneplan's mean-from-cap default (half the cap)
            opt["completion_len_max"] = cap
        kw["rollout_engine"] = eng
        if eng == "vllm" and str(row.get("rollout_placement") or "").strip() == "separate":
            opt["rollout_gpus"] = _num(row, "rollout_gpus")
        if eng == "vllm" and "rollout_tp" in fields:
            opt["rollout_tp"] = _num(row, "rollout_tp")
        if not any(t in fw for t in SLEEP_OFF) and not re.search(r"old_log_prob (\\|0\b)|Old Log Prob \\",
                                                                   str(row.get("notes"))):
            # verl, NeMo RL/Aligner, AReaL, SkyRL recompute old log-probs every step; verl's fully-async rows'
            # phase tables mark that pass '\' or 0 (not run: the rollout's own log-probs serve)
            kw["old_logprobs"] = True
        if (eng == "vllm" and "rollout_sleep" in fields and "rollout_gpus" not in opt
                and not any(t in fw for t in SLEEP_OFF)):
            kw["rollout_sleep"] = True
        gb, pr = _num(row, "global_batch_size"), _num(row, "prompts_per_step")
        notes = str(row.get("notes") or "")
        minis = re.search(r"ppo_n_minibatches (\d+)", notes)  # AReaL's optimizer steps per RL step
        if gb and pr and pr > gb and (pr / gb).is_integer():  # optimizer steps per RL step (mini-batches)
            opt["train_steps_per_rollout"] = pr / gb
        elif minis:
            opt["train_steps_per_rollout"] = int(minis.group(1))
        if "rollout_gpus" in opt and re.search(r"async|off.policy", notes, re.I):
            opt["off_policy_steps"] = 1  # verl fully-async / one-step-off: generation runs a step ahead
        share = re.search(r"gpu_memory_utilization (0?\.\d+|1\.0)", notes)  # the engine's share, where stated
        seqs = re.search(r"max_num_seqs (\d+)", notes)  # and its concurrent sequences (AReaL's scripts)
        if eng == "vllm":
            kw.update({k: t(m.group(1)) for k, t, m in (("gpu_memory_utilization", float, share),
                                                         ("max_num_seqs", int, seqs)) if m})
        if str(row.get("reference") or "").strip() == "model" and _num(row, "kl_beta") is None:
            # a reference model's forward every step (the row's reference column) with its coefficient not
            # stated, which enters neither time nor memory: verl's kl_loss_coef default stands in
            opt["kl_beta"] = VERL_KL_COEF
        critic = re.search(r"Critic Node Count (\d+)", notes)  # NeMo-Aligner: the critic (+ RM) on its own nodes
        if critic and stage == "ppo":
            opt["critic_gpus"] = int(critic.group(1)) * int(cfg.job.gpus // cfg.job.nodes)
        kw.update({k: int(v) if k != "kl_beta" else v for k, v in opt.items() if v})
        kw["seq_len"] = prompt
    elif stage == "gkd":  # the cap (max_new_tokens) as the completion, the teacher the notes name
        if str(row.get("rollout_placement") or "").strip() == "separate":
            raise InputError("rollout-gpus", "gkd with its engine on GPUs of its own is not modelled: not estimated")
        teacher = re.search(r"teacher (\S+/\S+)", str(row.get("notes") or ""))
        kw.update(completion_len=int(_num(row, "completion_len_max") or 0) or None, seq_len=prompt,
                  rollout_engine=ENGINES.get(str(row.get("rollout_engine") or "hf").strip().lower(), "hf"),
                  teacher_model=teacher.group(1) if teacher else None)
    return JobSpec(**kw), prompt


PHASES = {"gen": ("rollout_prefill_s", "rollout_decode_s", "rollout_decode_tail_s", "rollout_weight_sync_s"),
          "old_log_prob": ("policy_nograd_s",), "ref": ("reference_forward_s",)}
"""verl's phase timers (the notes' copies of its tables) and the step parts that cost them. verl 0.6.0's
"gen" timer (trainer/ppo/ray_trainer.py marked_timer("gen")) wraps generate_sequences, which runs
rollout_mode() (the refit: the trainer's weights gathered into the woken engine), the generation, and
trainer_mode() (the engine put to sleep) (workers/fsdp_workers.py generate_sequences): the refit is gen's."""


def phases(row: dict, out: dict) -> dict:
    """Measured (the notes) and predicted seconds of verl's phases where a row's notes give them: gen,
    old_log_prob, ref, and update_actor (the step less the other parts)."""
    first = {k: float(v.reshape(-1)[0]) for k, v in out.items() if k.endswith("_s") and hasattr(v, "reshape")}
    rec = {}
    for name, parts in {**PHASES, "update_actor": ()}.items():
        label = r"(?:gen|rollout time\(s\))" if name == "gen" else name.replace("_", "[_ ]")  # verl's dpsk.md table
        got = re.search(r"\b" + label + r" ([\d.]+)", str(row.get("notes")), re.I)
        if got:
            extra = [k for k in first if k.startswith(("rollout_", "reward_", "reference_", "policy_nograd",
                                                       "value_", "overlap_"))]
            rec[f"{name}_s"] = float(got.group(1))
            rec[f"{name}_pred_s"] = sum(first.get(k, 0.0) for k in parts) if parts else first["step_s"] - sum(
                first[k] for k in extra)
    return rec


def step_interval(cfg, job) -> dict:
    """The 80% step-time interval `tuneplan estimate` gives the row (its shipped calibration's width): with
    the mean completion length's range where the row gives no mean (after), and without it (before)."""
    from tuneplan.api import estimate

    iv = estimate(cfg.model, cfg.gpu, job=job).interval or {}
    if "step_time_s_low" not in iv:
        return {}
    s_lo, s_hi = iv.get("completion_len_spread", {}).get("step_s", (1.0, 1.0))
    lo, hi = iv["step_time_s_low"], iv["step_time_s_high"]
    return {"low_before": lo / s_lo, "high_before": hi / s_hi, "low": lo, "high": hi}


def evaluate(paths):
    import numpy as np
    import pandas as pd

    from tuneplan.errors import InputError, TuneplanError
    from tuneplan.estimators.stages import run_stage
    from tuneplan.estimators.tuneplan_physics import TuneplanEstimator
    from tuneplan.learn.dataset import row_to_config
    from tuneplan.runs.io import read_runs

    df = read_runs([p for p in paths if Path(p).exists()], resolve=False).df
    df = df[df["stage"].notna() & (df["stage"].astype(str).str.lower() != "sft")]
    est = TuneplanEstimator()
    cache: dict = {}
    recs = []
    for row in df.to_dict("records"):
        named = str(row.get("gpu") or "nan").strip() not in ("", "nan")
        rec = {"id": row["id"], "source": row["source"], "stage": str(row["stage"]).lower(),
               "cap_only": _num(row, "completion_len_mean") is None and _num(row, "completion_len_max") is not None,
               "measured_step": _num(row, "step_time_s"), "pred_step": np.nan, "fits": np.nan, "why": ""}
        try:
            if not named:
                raise InputError("gpu", "the source names no GPU: not estimated (not guessed)")
            cfg = row_to_config(sft_row(row), cache)
            job, prompt = stage_job(row, cfg)
            run = run_stage(est, cfg.model, cfg.gpu, job, prompt, 1.0, search_max_mb=False)
            rec["pred_step"] = float(np.asarray(run.out["step_s"]).reshape(-1)[0])
            rec["fits"] = float(bool(np.asarray(run.out.get("fits", True)).reshape(-1)[0]))
            rec.update(phases(row, run.out))
            rec.update(step_interval(cfg, job))
            rec["filled"] = str(row.get("defaults_used") or "")  # the source defaults the row took
        except (TuneplanError, ValueError, KeyError) as exc:
            rec["why"] = f"{type(exc).__name__}: {str(exc)[:110]}"
        recs.append(rec)
    out = pd.DataFrame(recs)
    out["step_ape"] = (out["pred_step"] / out["measured_step"] - 1).abs()
    m = pd.to_numeric(out["measured_step"])
    for end in ("_before", ""):  # the measured step inside the interval (NaN: no interval or no measurement)
        if f"low{end}" in out:
            out[f"inside{end}"] = ((out[f"low{end}"] <= m) & (m <= out[f"high{end}"])).where(
                out[f"low{end}"].notna() & m.notna())
    return out


def summary(out):
    import numpy as np
    import pandas as pd

    rows = []
    for (src, st), g in list(out.groupby(["source", "stage"])) + [(("ALL", ""), out)]:
        ans = g["pred_step"].notna()
        e = g["step_ape"].dropna()
        rows.append({"source": src, "stage": st, "rows": len(g), "answered": int(ans.sum()), "n_step": len(e),
                     "step_mdape": e.median() if len(e) else np.nan,
                     "no_fit": int((g["fits"] == 0).sum()), "cap_only": int((g["cap_only"] & ans).sum()),
                     **{f"cover{end}": g[f"inside{end}"].mean() for end in ("_before", "") if f"inside{end}" in g}})
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="*", default=[str(p) for p in DEFAULT_RUNS])
    ap.add_argument("--why", action="store_true", help="list each refused row's reason")
    ap.add_argument("--rows", action="store_true", help="list every row with a measured step")
    ap.add_argument("--phases", action="store_true", help="verl's phases, measured and predicted, where given")
    ap.add_argument("--csv")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    out = evaluate(args.runs)
    import pandas as pd

    with pd.option_context("display.width", 200, "display.max_colwidth", 120):
        print(summary(out).to_string(index=False, float_format=lambda x: f"{x:.3f}"))
        if args.rows:
            cols = ["id", "stage", "measured_step", "pred_step", "step_ape", "fits", "cap_only", "low_before",
                    "high_before", "low", "high"]
            print(out.dropna(subset=["measured_step"])[[c for c in cols if c in out]].to_string(index=False))
        if args.phases:
            cols = [c for n in (*PHASES, "update_actor") for c in (f"{n}_s", f"{n}_pred_s") if c in out]
            print(out.dropna(subset=cols[:1])[["id", "measured_step", "pred_step", *cols]].to_string(
                index=False, float_format=lambda x: f"{x:.0f}"))
        if args.why:
            print(out[out["why"] != ""][["id", "why"]].to_string(index=False))
            filled = out[out.get("filled", pd.Series("", index=out.index)).fillna("") != ""]
            print(filled[["id", "filled"]].to_string(index=False) if len(filled) else "")
    if args.csv:
        out.to_csv(args.csv, index=False)
    print(f"\n{len(out)} rows in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
