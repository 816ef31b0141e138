"""Each plot rendered to PNG and SVG: a valid image of sensible size, with a title, axis labels and a
legend."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

PIL = pytest.importorskip("PIL.Image")

MODEL = "meta-llama/Llama-3.1-8B"
WORK = {"examples": 20_000, "tokens_per_example": 512, "epochs": 2}


def check_png(path):
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 10_000
    with PIL.open(path) as im:
        im.verify()
    with PIL.open(path) as im:
        w, h = im.size
        assert 600 <= w <= 4000 and 400 <= h <= 3000
        assert sum(1 for n in im.convert("L").histogram() if n) > 8  # not a blank image


def check_svg(path, words):
    text = path.read_text(encoding="utf-8")
    root = ET.fromstring(text)
    assert root.tag.endswith("svg")
    assert len(text) > 10_000
    for w in words:
        assert w in text, w


@pytest.fixture(scope="module")
def plan_result():
    from tuneplan.plan.search import plan_run as plan

    return plan(MODEL, gpus=["A100-SXM4-80GB", "H100-SXM5-80GB", "L40S-48GB"], methods=["full", "lora", "qlora"],
                max_gpus=16, deadline_s=3 * 3600, budget_usd=60, interval=None, **WORK)


def test_plan_plot(tmp_path, plan_result):
    from tuneplan.report.plots import plot_plan

    png = plot_plan(plan_result, tmp_path / "plan.png")
    check_png(png)
    svg = plot_plan(plan_result, tmp_path / "plan.svg")
    check_svg(svg, ["wall-clock time (h)", "cost per run (USD)", "Pareto front", "deadline 3 h", "budget $60",
                    "recommended", "H100-SXM5-80GB", "qlora", MODEL])


def test_plan_plot_without_anything_that_fits(tmp_path):
    from tuneplan.plan.search import plan_run as plan
    from tuneplan.report.plots import plot_plan

    r = plan("meta-llama/Llama-3.1-70B", gpus=["L4-24GB"], methods=["full"], max_gpus=1, examples=100,
             tokens_per_example=512, interval=None)
    assert not r.ok
    check_svg(plot_plan(r, tmp_path / "none.svg"), ["no configuration fits"])


def test_estimate_plot(tmp_path):
    import tuneplan
    from tuneplan.report.plots import plot_estimate

    r = tuneplan.estimate(MODEL, "A100-SXM4-80GB", method="full", gpus=4, sharding="fsdp", micro_batch=4,
                          grad_ckpt=True, interval=None, **WORK)
    check_png(plot_estimate(r, tmp_path / "est.png"))
    check_svg(plot_estimate(r, tmp_path / "est.svg"), ["time per optimizer step", "memory per GPU (GiB)",
                                                       "GPU memory 80 GiB", "optimizer"])
    # several side by side, one of them out of memory
    r2 = tuneplan.estimate(MODEL, "L40S-48GB", method="full", gpus=1, micro_batch=8, interval=None, **WORK)
    check_png(plot_estimate([r, r2], tmp_path / "two.png"))


def test_estimate_cli_plot(tmp_path, capsys):
    from tuneplan.cli import main

    out = tmp_path / "e.png"
    assert main(["estimate", "--model", MODEL, "--gpu", "H100-SXM5-80GB", "--method", "lora", "--examples", "1000",
                 "--tokens-per-example", "512", "--plot", str(out), "--json"]) == 0
    check_png(out)


def test_curve_plot(tmp_path):
    from tuneplan.plan.curve import curve
    from tuneplan.report.plots import plot_curve

    r = curve("Qwen/Qwen-7B", "A100-SXM4-80GB", method="lora", seq_len=1024)
    check_png(plot_curve(r, tmp_path / "curve.png"))
    check_svg(plot_curve(r, tmp_path / "curve.svg"), ["throughput (tokens/s", "memory per GPU (GiB)",
                                                       "largest that fits", "micro-batch"])


def test_curve_with_measured_runs(tmp_path):
    from tuneplan.plan.curve import curve
    from tuneplan.report.plots import plot_curve

    runs = tmp_path / "runs.csv"
    runs.write_text(
        "id,source,model,model_hf_id,method,gpu,gpus,micro_batch_size,seq_len,tokens_per_s,peak_mem_gib\n"
        "t-1,test,Qwen-7B,Qwen/Qwen-7B,lora,A100-SXM4-80GB,1,1,1024,3000,22\n"
        "t-2,test,Qwen-7B,Qwen/Qwen-7B,lora,A100-SXM4-80GB,1,2,1024,3600,26\n"
        "t-3,test,Qwen-7B,Qwen/Qwen-7B,lora,A100-SXM4-80GB,1,4,1024,3900,33\n"
        "t-4,test,Qwen-7B,Qwen/Qwen-7B,lora,H100-SXM5-80GB,1,4,1024,7000,33\n"
        "t-5,test,Qwen-7B,Qwen/Qwen-7B,full,A100-SXM4-80GB,1,1,1024,1500,70\n", encoding="utf-8")
    r = curve("Qwen/Qwen-7B", "A100-SXM4-80GB", method="lora", seq_len=1024, runs=str(runs))
    assert list(r.measured["id"]) == ["t-1", "t-2", "t-3"]
    check_svg(plot_curve(r, tmp_path / "m.svg"), ["measured (3 run(s))"])


def test_bad_extension(tmp_path, plan_result):
    from tuneplan.errors import InputError
    from tuneplan.report.plots import plot_plan

    with pytest.raises(InputError, match="png, svg"):
        plot_plan(plan_result, tmp_path / "plan.jpg")


def test_estimate_does_not_import_matplotlib_or_pandas():
    import subprocess
    import sys

    code = ("import sys; from tuneplan.cli import main; "
            "main(['estimate','--model','Qwen/Qwen2.5-0.5B','--gpu','L4-24GB','--examples','10',"
            "'--tokens-per-example','10','--json']); "
            "bad=[m for m in ('matplotlib','pandas') if m in sys.modules]; sys.exit(1 if bad else 0)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0
