"""Learners on synthetic data with known answers, the no-leak rule, intervals' coverage, and the
calibration file round trip."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest
from tests.conftest import reference_dir

from tuneplan.estimators.base import get_estimator
from tuneplan.estimators.calibration import Calibration, dumps, load_calibration
from tuneplan.learn.calibration import fit_calibration
from tuneplan.learn.dataset import configs_from_rows
from tuneplan.learn.intervals import conformal_bounds
from tuneplan.learn.learners import NotEnoughData, fit_learner, throughput_rows, tuneplan_rows
from tuneplan.learn.measured import training_set
from tuneplan.learn.predict_table import predict_configs
from tuneplan.learn.validate import LeakError, make_folds, validate
from tuneplan.physics.constants import DEFAULT_CONSTANTS

MODELS = ["Qwen/Qwen2.5-0.5B", "meta-llama/Llama-3.1-8B", "mistralai/Mistral-7B-v0.1"]
GPUS = ["A100-SXM4-80GB", "H100-SXM5-80GB"]


def grid_frame(n_max: int | None = None, seed: int = 0) -> pd.DataFrame:
    rows = []
    combos = itertools.product(MODELS, GPUS, ("full", "lora"), (1, 4, 16), (256, 1024), (1, 2))
    for i, (m, g, meth, mb, seq, gpus) in enumerate(combos):
        rows.append({"id": f"syn-{i}", "source": ["alpha", "beta", "gamma"][i % 3], "model": m, "model_hf_id": m,
                     "gpu": g, "method": meth, "micro_batch_size": mb, "seq_len": seq, "gpus": gpus, "nodes": 1,
                     "grad_accum": 1, "precision": "bf16", "optimizer": "adamw", "grad_ckpt": 0, "flash_attn": 1,
                     "lora_rank": 16, "lora_targets": "all-linear", "sharding": "ddp", "dataset": "syn",
                     "mem_kind": "allocated"})
    df = pd.DataFrame(rows)
    if n_max:
        df = df.sample(n=n_max, random_state=seed).reset_index(drop=True)
    return df


def with_measurements(df: pd.DataFrame, estimator, noise: float = 0.0, seed: int = 0,
                      factor=None) -> pd.DataFrame:
    configs, errors = configs_from_rows(df.to_dict("records"))
    assert not any(errors), [e for e in errors if e][:3]
    pred = predict_configs(configs, estimator, with_max_batch=False)
    rng = np.random.default_rng(seed)
    thr = pred["tokens_per_s"] * np.exp(rng.normal(0, noise, len(df)))
    if factor is not None:
        thr = thr * np.array([factor(r) for r in df.to_dict("records")])
    out = df.copy()
    out["tokens_per_s"] = thr
    out["peak_mem_gib"] = pred["allocated_gib"] * np.exp(rng.normal(0, noise, len(df)))
    return out


def test_tuneplan_learner_recovers_planted_constants():
    planted = DEFAULT_CONSTANTS.with_(mfu_max=0.42, tokens_half=1500.0, activation_scale=1.4)
    truth = get_estimator("tuneplan", "none").__class__(planted)
    df = with_measurements(grid_frame(), truth)
    ts = training_set(df)
    # the residual's shares fixed (their choice is tested in test_learn_transfer): the constants are the point
    learner = fit_learner("tuneplan", ts, shrink=((1.0, 1.0, 1.0), (1.0, 1.0, 1.0)))
    assert learner.constants.mfu_max == pytest.approx(0.42, rel=0.1)
    assert learner.constants.activation_scale == pytest.approx(1.4, rel=0.1)
    pred = predict_configs(ts.configs, learner, with_max_batch=False)
    assert np.median(np.abs(pred["tokens_per_s"] / ts.tokens_per_s - 1)) < 0.03


def test_memory_constants_kept_at_priors_when_sources_disagree():
    truth = get_estimator("tuneplan", "none")
    df = with_measurements(grid_frame(), truth)
    scale = {"alpha": 1.6, "beta": 0.6, "gamma": 1.0}  # each source holds its own extra buffers
    df["peak_mem_gib"] = df["peak_mem_gib"] * df["source"].map(scale)
    learner = fit_learner("tuneplan", training_set(df))
    # fitted on two sources, the constants miss the third by more than the priors do: priors kept
    assert learner.constants.activation_scale == DEFAULT_CONSTANTS.activation_scale
    assert any("kept at their priors" in n for n in learner.notes_)


def test_memory_residual_only_for_a_users_own_stack():
    """Fitted across several sources the memory residual did worse than the physics on held-out ones
    (docs/learning.md), so a calibration of three sources keeps the physics' memory and says so; the
    rows of one stack (a user's own) still get it."""
    truth = get_estimator("tuneplan", "none")
    df = with_measurements(grid_frame(), truth)
    df["peak_mem_gib"] = df["peak_mem_gib"] * np.where(df["method"] == "lora", 1.3, 1.0)
    shares = ((1.0, 1.0, 1.0), (1.0, 1.0, 1.0))
    several = fit_learner("tuneplan", training_set(df), shrink=shares)
    assert several.mem_residual_ is None and any("memory residual not fitted" in n for n in several.notes_)
    own = fit_learner("tuneplan", training_set(df.assign(source="mine")), shrink=shares)
    assert own.mem_residual_ is not None


def test_slst_recovers_planted_scaling_law():
    df = grid_frame()
    configs, _ = configs_from_rows(df.to_dict("records"))
    # planted: step time = 1e-9 x P_active^0.9 x tokens^1.0 x gpus^-0.8 (seconds)
    thr = []
    for c in configs:
        tokens = c.job.micro_batch * c.seq_len * c.job.gpus
        step = 1e-9 * c.model.params_active ** 0.9 * tokens ** 1.0 * c.job.gpus ** -0.8
        thr.append(tokens / step)
    df["tokens_per_s"] = thr
    learner = fit_learner("slst", training_set(df))
    law = dict(zip(("const", "log_params_active", "log_tokens_per_step", "log_gpus"), learner.coef_[:4], strict=True))
    assert law["log_params_active"] == pytest.approx(0.9, abs=0.05)
    assert law["log_tokens_per_step"] == pytest.approx(1.0, abs=0.05)
    assert law["log_gpus"] == pytest.approx(-0.8, abs=0.05)


def test_kavier_tier1_recovers_planted_scales_and_tier2_medians():
    kav = get_estimator("kavier")
    scale = {"full": 0.8, "lora": 1.3}
    df = with_measurements(grid_frame(), kav, factor=lambda r: scale[r["method"]])
    learner = fit_learner("kavier", training_set(df))
    m = learner.scales_.method
    assert m["lora"] / m["full"] == pytest.approx(1.3 / 0.8, rel=0.05)
    # tier 2 on top of a perfect tier 1: medians of measured / tier-1 are ~1
    assert np.median(list(learner.scales_.interaction.values())) == pytest.approx(1.0, abs=0.05)
    # a planted interaction of one group is picked up by tier 2 as its median ratio
    key = "meta-llama/Llama-3.1-8B|lora|H100-SXM5-80GB|2"
    df2 = with_measurements(grid_frame(), kav, factor=lambda r: 1.5 if (
        r["model"] == "meta-llama/Llama-3.1-8B" and r["method"] == "lora" and r["gpu"] == "H100-SXM5-80GB"
        and r["gpus"] == 2) else 1.0)
    l2 = fit_learner("kavier", training_set(df2))
    others = [v for k, v in l2.scales_.interaction.items() if k != key]
    assert l2.scales_.interaction[key] / np.median(others) == pytest.approx(1.5, rel=0.05)


def test_unknown_names_fall_back_to_one():
    kav = get_estimator("kavier")
    df = with_measurements(grid_frame(), kav)
    est = fit_learner("kavier", training_set(df))
    # a GPU never seen in training gets E_g = 1.0
    assert "A10G-24GB" not in est.scales_.gpu
    assert est.scales_.gpu.get("A10G-24GB", 1.0) == 1.0


def test_xia_fits_eq2_per_group():
    from tuneplan.estimators.xia import throughput

    df = grid_frame()
    configs, _ = configs_from_rows(df.to_dict("records"))
    q = [throughput(c.job.micro_batch, 1.0, 0.5, 1.0, 2.0) for c in configs]  # queries/s per replica
    df["tokens_per_s"] = [qi * c.seq_len * c.job.dp for qi, c in zip(q, configs, strict=True)]
    learner = fit_learner("xia", training_set(df))
    c2, c3, c4 = learner.coefficients_.eq2["Qwen/Qwen2.5-0.5B|A100-SXM4-80GB|syn"]
    assert c2 == pytest.approx(0.5, rel=1e-3) and c4 == pytest.approx(2.0, rel=1e-3)


def test_seed_estimators_follow_the_fit_contract():
    """fit(X, y) returns the estimator itself, its fitted attributes end in `_`, and the payload it
    writes reads back into an estimator that predicts the same."""
    from tuneplan.estimators.registry import estimator_class

    df = with_measurements(grid_frame(), get_estimator("kavier"))
    X, y = throughput_rows(training_set(df), xia=True)
    for name, fitted in (("kavier", "scales_"), ("xia", "coefficients_"), ("slst", "coef_")):
        cls = estimator_class(name)
        est = cls()
        assert est.fit(X, y) is est and getattr(est, fitted) is not None
        back = cls.from_payload(est.payload())
        np.testing.assert_allclose(back.predict_arrays(X)["step_s"], est.predict_arrays(X)["step_s"], rtol=1e-12)


def test_too_few_rows_is_a_clear_message():
    df = with_measurements(grid_frame(n_max=3), get_estimator("tuneplan", "none"))
    with pytest.raises(NotEnoughData, match="at least"):
        fit_learner("tuneplan", training_set(df))


def test_no_learner_is_evaluated_on_rows_it_was_trained_on(monkeypatch):
    df = with_measurements(grid_frame(), get_estimator("tuneplan", "none"), noise=0.05)
    ts = training_set(df)
    for split in ("random", "by-source", "by-model", "by-gpu"):
        for fold in make_folds(ts, split, seed=1):
            assert not set(fold.train.df["id"]) & set(fold.test.df["id"])
    # and every fit made for a fold (the learner and its interval cross-fits) sees none of that
    # fold's test rows: spy on the learners' fit
    current = {"fold": None}
    fits: list[tuple[str, set]] = []
    import tuneplan.learn.learners as learners

    def spy(train):
        fits.append((current["fold"], set(train.df["id"])))
        return tuneplan_rows(train)

    monkeypatch.setattr(learners, "tuneplan_rows", spy)
    report = validate(df, "by-source", seed=0, learners=("tuneplan",),
                      progress=lambda name: current.update(fold=name))
    tested = report.rows.groupby("fold")["id"].apply(set).to_dict()
    assert len(tested) == 3
    for fold_name, ids in tested.items():
        own = [f for name, f in fits if name == fold_name]
        assert own, fold_name
        assert all(not (ids & f) for f in own)
    # a planted leak is caught
    from tuneplan.learn import validate as V

    bad = V.Fold("leaky", ts, ts)
    with pytest.raises(LeakError):
        if V._row_keys(bad.train) & V._row_keys(bad.test):
            raise LeakError("rows in both")


def test_revealed_rows_of_a_held_out_source_train_and_are_never_judged():
    df = with_measurements(grid_frame(), get_estimator("tuneplan", "none"), noise=0.05)
    ts = training_set(df)
    plain = {f.name: f for f in make_folds(ts, "by-source", seed=0)}
    folds = make_folds(ts, "by-source", seed=0, reveal=3)
    assert len(folds) == len(plain)
    for fold in folds:
        src = fold.name.split("=")[1].split(" ")[0]
        assert fold.name.endswith("(3 revealed)")
        base = plain[f"source={src}"]
        moved = set(base.test.df["id"]) - set(fold.test.df["id"])
        # three of the held-out source's rows, measured ones, now train and are no longer judged
        assert len(moved) == 3 and moved <= set(fold.train.df["id"])
        assert (fold.train.source == src).sum() == 3
        assert not set(fold.train.df["id"]) & set(fold.test.df["id"])
        assert len(fold.test) == len(base.test) - 3
    from tuneplan.errors import InputError

    with pytest.raises(InputError, match="reveal"):
        make_folds(ts, "random", seed=0, reveal=3)
    # the same seed reveals the same rows
    again = make_folds(ts, "by-source", seed=0, reveal=3)
    assert [set(f.test.df["id"]) for f in again] == [set(f.test.df["id"]) for f in folds]


def test_reveal_needs_the_by_source_split(tmp_path, capsys):
    from tuneplan.cli import main

    df = with_measurements(grid_frame(), get_estimator("tuneplan", "none"), noise=0.05)
    path = tmp_path / "runs.csv"
    df.to_csv(path, index=False)
    assert main(["validate", "--runs", str(path), "--split", "random", "--reveal", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "reveal:" in err[0] and "by-source" in err[0]


def test_interval_coverage_on_synthetic_data():
    rng = np.random.default_rng(3)
    cal = rng.normal(0, 0.2, 400)
    test = rng.normal(0, 0.2, 4000)
    lo, hi = conformal_bounds(cal, 0.8)
    cover = np.mean((np.exp(test) >= lo) & (np.exp(test) <= hi))
    assert cover == pytest.approx(0.8, abs=0.03)


def test_calibration_round_trip_and_determinism(tmp_path):
    df = with_measurements(grid_frame(), get_estimator("tuneplan", "none"), noise=0.05)
    cal, _ = fit_calibration(df, "tuneplan", name="syn")
    p = tmp_path / "syn.json"
    cal.save(p)
    again, _ = fit_calibration(df, "tuneplan", name="syn")
    assert dumps(again.to_dict()) == p.read_text()  # byte-for-byte
    loaded = load_calibration(str(p), expected="tuneplan")
    assert isinstance(loaded, Calibration) and loaded.fingerprint == cal.fingerprint
    d = json.loads(p.read_text())
    assert d["format"] == "tuneplan-calibration" and d["version"] == 1
    assert len(d["intervals"]["tuneplan"]["throughput"]) > 10
    est = loaded.estimator()
    configs, _ = configs_from_rows(df.to_dict("records"))
    p1 = predict_configs(configs, est, with_max_batch=False)["tokens_per_s"]
    p2 = predict_configs(configs, cal.estimator(), with_max_batch=False)["tokens_per_s"]
    np.testing.assert_allclose(p1, p2, rtol=1e-9)


def test_calibration_wrong_learner_and_bad_file(tmp_path):
    from tuneplan.errors import DataFileError, InputError

    df = with_measurements(grid_frame(), get_estimator("kavier"))
    cal, _ = fit_calibration(df, "kavier", name="k")
    p = tmp_path / "k.json"
    cal.save(p)
    with pytest.raises(InputError, match="--estimator kavier"):
        load_calibration(str(p), expected="tuneplan")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DataFileError, match="bad.json:1"):
        load_calibration(str(bad))


@pytest.mark.skipif(reference_dir() is None, reason="the shared reference runs are not beside the repository")
def test_predict_resolves_names_as_calibrate_does_and_keeps_unresolvable_rows(tmp_path, capsys):
    from tuneplan.cli import main

    src = pd.read_csv(reference_dir() / "ms-swift.csv", low_memory=False)
    bad = src.iloc[[0]].copy()
    bad["id"], bad["gpu"] = "unresolvable-gpu-row", "NoSuchGPU-9000"
    runs = tmp_path / "runs.csv"
    pd.concat([src, bad]).to_csv(runs, index=False)
    out = tmp_path / "pred.csv"
    assert main(["predict", "--runs", str(runs), "--out", str(out)]) == 0
    capsys.readouterr()
    pred = pd.read_csv(out, low_memory=False, dtype={"error": str})
    assert len(pred) == len(src) + 1  # every row written, in file order
    assert list(pred["id"]) == [*src["id"], "unresolvable-gpu-row"]
    # 'A100-80GB' is a family name: the catalog reads it as its default variant (A100-SXM4-80GB), as calibrate does
    ok = pred["error"].isna()
    assert ok.sum() > 100 and pred.loc[ok, "pred_peak_mem_gib"].notna().all()
    assert not ok.iloc[-1] and "NoSuchGPU-9000" in pred["error"].iloc[-1]  # the row kept, saying why
    assert pred.loc[~ok, "error"].str.len().gt(0).all()


def test_throughput_pull_is_chosen_on_held_out_training_sources():
    """Nested: the pull of the throughput constants is chosen on groups of the training sources held out
    in turn; constants that hold in every source beat the priors, and the scores are kept."""
    from tuneplan.learn.dataset import arrays_for

    planted = DEFAULT_CONSTANTS.with_(mfu_max=0.42, tokens_half=1500.0)
    truth = get_estimator("tuneplan", "none").__class__(planted)
    ts = training_set(with_measurements(grid_frame(n_max=48), truth))
    learner = get_estimator("tuneplan", "none")
    chosen = learner._throughput_weight(arrays_for(ts.configs), ts.tokens_per_s, ts.source)
    scores = learner.choices_["throughput_pull"]["scores"]
    assert chosen is not None and set(scores) == {"0.0005", "0.02", "None"}
    assert scores[str(chosen)] < scores["None"]


def test_reveal_adapts_the_learner_fitted_on_the_other_sources():
    """validate --reveal k: the learner fitted without the held-out source, adapted to its k revealed
    rows (what `calibrate` does with a user's first runs). Each source is off by its own factor: the
    constants are fitted on the shape the sources share (source_centring), the revealed rows give the
    held-out source's factor."""
    truth = get_estimator("tuneplan", "none")
    scale = {"alpha": 1.5, "beta": 0.7, "gamma": 1.0}
    df = with_measurements(grid_frame(n_max=36), truth, noise=0.02)
    df["tokens_per_s"] = df["tokens_per_s"] * df["source"].map(scale)
    shown = validate(df, "by-source", learners=("tuneplan",), reveal=3).metrics()
    err = {e: g.set_index("source")["throughput_mdape"] for e, g in shown.groupby("estimator")}
    assert err["tuneplan"]["ALL"] < 0.06 and err["tuneplan-physics+adapter"]["ALL"] < 0.03
    assert err["tuneplan-physics"]["ALL"] > 0.25  # the factors themselves


@pytest.mark.skipif(reference_dir() is None, reason="the shared reference runs are not beside the repository")
def test_calibrate_never_writes_over_the_shipped_calibration_it_adapts(tmp_path, monkeypatch, capsys):
    # without --from-scratch the runs adapt the shipped default.json: --out naming it (even with --force)
    # would lose the base every later estimate reads; the package's data folder is a copy here
    import shutil

    import tuneplan.data
    from tuneplan.cli import main

    (tmp_path / "calibration").mkdir()
    shipped = tmp_path / "calibration" / "default.json"
    shutil.copy(tuneplan.data.DIR + "/calibration/default.json", shipped)
    before = shipped.read_bytes()
    monkeypatch.setattr(tuneplan.data, "DIR", str(tmp_path))
    runs = str(reference_dir() / "litgpt.csv")
    for extra in ([], ["--base", "default"]):
        assert main(["calibrate", "--runs", runs, "--out", str(shipped), "--force", *extra]) == 2
        assert "is also an input of this command" in capsys.readouterr().err
    assert shipped.read_bytes() == before


@pytest.mark.skipif(reference_dir() is None, reason="the shared reference runs are not beside the repository")
def test_validate_title_does_not_claim_more_revealed_rows_than_a_source_has(tmp_path, monkeypatch, capsys):
    # 3 rows of one source, --reveal 5: 2 are revealed (one stays held out); the title said "5 rows"
    from tuneplan.cli import main

    monkeypatch.setenv("COLUMNS", "250")
    runs = tmp_path / "three.csv"
    runs.write_text("\n".join((reference_dir() / "litgpt.csv").read_text().splitlines()[:4]) + "\n")
    assert main(["validate", "--runs", str(runs), "--split", "by-source", "--reveal", "5"]) == 0
    out = capsys.readouterr().out
    assert "up to 5 rows of each held-out source revealed" in out and "source=litgpt (2 revealed)" in out
