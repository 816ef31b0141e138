"""TRL's reward-model training (rm) and online preference stages (online-dpo, xpo, nash-md): the parts of a
step sum to it, and each new part is the existing one composed as the trainers' code runs it."""

from __future__ import annotations

import pytest

import tuneplan
from tuneplan.errors import InputError
from tuneplan.estimators.stages import run_stage
from tuneplan.estimators.tuneplan_physics import TuneplanEstimator
from tuneplan.physics import stages as ps
from tuneplan.specs.catalog import resolve_model
from tuneplan.specs.gpu import resolve_gpu
from tuneplan.specs.job import make_job

MODEL, GPU = "Qwen/Qwen2-0.5B-Instruct", "H100-SXM5-80GB"
WORK = dict(examples=1000, tokens_per_example=None, calibration="none", interval=None)


def _est(**kw):
    return tuneplan.estimate(MODEL, GPU, **{**WORK, "method": "full", "gpus": 8, "micro_batch": 8, "seq_len": 512,
                                            **kw})


def _sums(r) -> None:
    bd = r.step_breakdown_s
    assert bd["total"] == pytest.approx(sum(v for k, v in bd.items() if k != "total"))


def test_online_defaults_are_trls():
    pytest.importorskip("trl")
    from trl.experimental.online_dpo import OnlineDPOConfig

    fields = OnlineDPOConfig.__dataclass_fields__
    for stage in ps.ONLINE_SHAPES:
        d = ps.rl_defaults(stage)
        assert d["completion_len"] == fields["max_new_tokens"].default
        assert [d["kl_beta"]] == fields["beta"].default_factory()


def test_reward_model_is_a_pair_through_a_scalar_head():
    est, m, g = TuneplanEstimator(), resolve_model(MODEL), resolve_gpu(GPU)
    job = make_job(method="full", gpus=8, micro_batch=4, seq_len=512, stage="rm")
    run = run_stage(est, m, g, job, 512, 1000.0, search_max_mb=False)
    a = run.arrays
    assert float(a["micro_batch"][0]) == 8  # chosen + rejected of 4 pairs in one batch
    assert float(a["head_flops"][0]) == 2.0 * m.hidden_size and float(a["vocab"][0]) == 1.0
    assert "reference_forward_s" not in run.out  # no reference
    assert float(run.out["step_s"][0]) == pytest.approx(float(est.predict_arrays(a)["step_s"][0]))
    orpo = run_stage(est, m, g, job.updated(stage="orpo"), 512, 1000.0, search_max_mb=False)
    assert float(run.out["step_s"][0]) < float(orpo.out["step_s"][0])  # same pairs, no vocabulary-wide head
    _sums(_est(stage="rm"))


@pytest.mark.parametrize(("stage", "call_batch", "passes"), [("online-dpo", 2, 1), ("xpo", 1, 2), ("nash-md", 1, 3)])
def test_online_generation_by_hand(stage, call_batch, passes):
    from tuneplan.estimators.rl_stages import generation
    from tuneplan.physics.constants import DEFAULT_CONSTANTS as c
    from tuneplan.physics.terms import build_arrays

    r = _est(stage=stage)
    _sums(r)
    bd = r.step_breakdown_s
    st = r.to_dict()["stage"]
    prompts = 8 * 8  # micro-batch counts prompts: 8 per GPU x 8 GPUs x 1 accumulation step
    trained = ps.ONLINE_SHAPES[stage].trained
    assert st["prompts_per_step"] == prompts and st["completions_per_step"] == prompts * trained
    # one generate call of `call_batch` completions per prompt, at the 64 tokens of OnlineDPOConfig, run
    # `passes` times (XPO: the reference's call; Nash-MD: the mixture runs policy and reference)
    m, g = resolve_model(MODEL), resolve_gpu(GPU)
    job = make_job(method="full", gpus=8, micro_batch=8 * trained, seq_len=512, stage="grpo")
    a = build_arrays([(m, g, job, 512 + 64)], c)
    one = generation(a, m, g, job, prompts * call_batch, 512, 64, c)
    assert bd["rollout_decode"] == pytest.approx(passes * one["decode_s"], rel=1e-9)
    assert bd["rollout_prefill"] == pytest.approx(passes * one["prefill_s"], rel=1e-9)
    assert bd["reference_forward"] > 0  # beta 0.1: the reference over every trained sequence


def test_online_stages_compare_as_their_trainers_run():
    dpo, xpo, nash = (_est(stage=s).step_breakdown_s for s in ("online-dpo", "xpo", "nash-md"))
    # same trained batch and reference pass for online DPO and XPO; XPO's two calls each reread the weights
    assert xpo["reference_forward"] == pytest.approx(dpo["reference_forward"])
    assert xpo["rollout_decode"] > dpo["rollout_decode"]
    # Nash-MD trains on one sequence per prompt: half the reference pass of online DPO's two
    assert nash["reference_forward"] < dpo["reference_forward"]


def test_online_group_is_two():
    with pytest.raises(InputError, match="group-size.*2 completions per prompt"):
        _est(stage="online-dpo", group_size=4)
    assert _est(stage="online-dpo", group_size=2).step_breakdown_s == _est(stage="online-dpo").step_breakdown_s


def test_gkd_defaults_are_trls():
    pytest.importorskip("trl")
    from trl.experimental.gkd import GKDConfig

    fields = GKDConfig.__dataclass_fields__
    assert fields["lmbda"].default == ps.GKD_LMBDA and fields["max_new_tokens"].default == ps.GKD_COMPLETION_LEN


def test_gkd_step_by_hand():
    from tuneplan.estimators.rl_stages import generation
    from tuneplan.estimators.stage_run import forward_only, reference_bytes
    from tuneplan.physics.constants import BYTES_PER_GIB
    from tuneplan.physics.constants import DEFAULT_CONSTANTS as c
    from tuneplan.physics.terms import build_arrays

    est, m, g = TuneplanEstimator(), resolve_model(MODEL), resolve_gpu(GPU)
    teacher = resolve_model("Qwen/Qwen2.5-1.5B")
    job = make_job(method="full", gpus=8, micro_batch=4, grad_accum=2, seq_len=256, stage="gkd",
                   teacher_model="Qwen/Qwen2.5-1.5B")
    run = run_stage(est, m, g, job, 256, 1000.0, search_max_mb=False)
    out = run.out
    seq = 256 + 128  # prompt + GKDConfig.max_new_tokens
    assert float(run.arrays["seq_len"][0]) == seq
    # the student's generation: one call per micro-step of its 4 samples, on half the micro-steps (lmbda 0.5)
    a = build_arrays([(m, g, job, seq)], c)
    one = generation(a, m, g, job, 4 * 8, 256, 128, c)
    assert float(out["rollout_decode_s"][0]) == pytest.approx(one["decode_s"] * 2 * 0.5, rel=1e-9)
    assert float(one["batch"]) == 4  # HF generate: each GPU its micro-batch
    # the teacher's no-grad forward over every sequence, and its frozen weights in memory
    ta = build_arrays([(teacher, g, job.training_job(8, method="full", quant=None, stage="sft"), seq)], c)
    assert float(out["reference_forward_s"][0]) == pytest.approx(float(forward_only(dict(est.predict_arrays(ta)),
                                                                                    ta)[0]))
    assert float(out["reference_model_gib"][0]) == pytest.approx(float(reference_bytes(ta)[0]) / BYTES_PER_GIB)
    # the JSD's buffers: micro-batch x sequence x vocabulary x 30 bytes
    assert float(out["loss_buffers_gib"][0]) == pytest.approx(4 * seq * m.vocab_size * 30.0 / BYTES_PER_GIB)
    sft = est.predict_arrays(a)["step_s"][0]
    parts = out["rollout_prefill_s"][0] + out["rollout_decode_s"][0] + out["reference_forward_s"][0]
    assert float(out["step_s"][0]) == pytest.approx(float(sft + parts))
    _sums(_est(stage="gkd"))


def test_gkd_options():
    with pytest.raises(InputError, match="teacher-model applies to --stage gkd"):
        _est(stage="sft", teacher_model="Qwen/Qwen2.5-1.5B")
    with pytest.raises(InputError, match="teacher-model: unknown model") as err:
        _est(stage="gkd", teacher_model="no/such-model")
    assert "--model" not in str(err.value)  # the hint names the option the user gave
    assert _est(stage="gkd", completion_len=64).step_breakdown_s["rollout_decode"] < _est(
        stage="gkd").step_breakdown_s["rollout_decode"]
