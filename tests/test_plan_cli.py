"""`tuneplan plan` and `tuneplan curve` end to end: exit codes, --json, --out, the workload file."""

from __future__ import annotations

import csv
import json

import pytest

from tuneplan.cli import main

PLAN = ["plan", "--model", "meta-llama/Llama-3.1-8B", "--examples", "50000", "--tokens-per-example", "800",
        "--epochs", "3", "--max-gpus", "16", "--gpus", "A100-SXM4-80GB,H100-SXM5-80GB,L40S-48GB",
        "--methods", "full,lora,qlora", "--interval", "0"]


def test_issue_command(capsys, tmp_path):
    out = tmp_path / "plan.png"
    rc = main(PLAN + ["--deadline", "12h", "--budget", "400", "--plot", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    assert "Recommended:" in text and "Why:" in text and "Pareto front" in text
    assert out.stat().st_size > 10_000


def test_json(capsys):
    assert main(PLAN + ["--deadline", "12h", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["ok"] is True and d["constraints"]["deadline_h"] == 12
    assert d["recommended"]["time_s"] <= 12 * 3600
    assert d["pareto"] and d["candidates"] and d["why"]
    assert len(d["candidates"]) == d["n_fit"]
    assert main(PLAN + ["--json", "--top", "4"]) == 0
    assert len(json.loads(capsys.readouterr().out)["candidates"]) == 4


def test_web_flag_spellings(capsys):
    assert main(PLAN + ["--deadline-h", "12", "--budget-usd", "400", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["constraints"]["deadline_s"] == 43200 and d["constraints"]["budget_usd"] == 400


def test_no_plan_is_an_answer_exit_0(capsys):
    rc = main(PLAN + ["--deadline", "1min"])
    captured = capsys.readouterr()
    assert rc == 0
    text = " ".join(captured.out.split())
    assert "Nothing meets the constraints: no configuration meets the 1 min deadline: the fastest is" in text
    rc = main(PLAN + ["--budget", "0.5", "--json"])
    captured = capsys.readouterr()
    assert rc == 0
    d = json.loads(captured.out)
    assert d["ok"] is False and d["status"] == "nothing-meets-constraints"
    assert "budget" in d["message"] and d["closest"]
    assert captured.err == ""


def test_nothing_fits_exit_0_with_why(capsys):
    args = ["plan", "--model", "meta-llama/Llama-3.1-405B", "--method", "full", "--gpus", "H100-SXM5-80GB",
            "--max-gpus", "1", "--examples", "1000", "--tokens-per-example", "512"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "Nothing fits: no configuration fits in memory" in " ".join(out.split())
    assert main(args + ["--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["ok"] is False and d["status"] == "nothing-fits" and d["recommended"] is None
    assert "fits in memory" in d["message"] and "GiB per GPU" in d["message"]


@pytest.mark.parametrize("args, field, close", [
    (["--gpus", "H100-SXM5-80GB,A100-SXM9-80GB"], "gpu", "A100-SXM4-80GB"),
    (["--provider", "coreweeve"], "provider", "CoreWeave"),
])
def test_unknown_names_exit_2(capsys, args, field, close):
    rc = main(PLAN + args)
    err = capsys.readouterr().err
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert f"{field}: unknown" in lines[0] and close in lines[0]


def test_bad_values_exit_2(capsys):
    assert main(PLAN + ["--deadline", "soon"]) == 2
    assert "deadline" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # argparse: one line, exit code 2
        main(PLAN + ["--objective", "cheap"])
    assert e.value.code == 2 and "cheapest" in capsys.readouterr().err
    assert main(PLAN + ["--methods", "lora,prefix"]) == 2
    assert "allowed" in capsys.readouterr().err


def test_out_csv(capsys, tmp_path):
    out = tmp_path / "cands.csv"
    assert main(PLAN + ["--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert rows and {"gpu", "gpus", "method", "time_s", "cost_usd", "pareto", "eligible"} <= set(rows[0])


def test_workload_file(capsys, tmp_path):
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(
        "id,model,examples,tokens_per_example,epochs,deadline,budget,gpus,methods\n"
        "small,Qwen/Qwen2.5-0.5B,10000,512,1,2h,,L4-24GB;A10G-24GB,lora\n"
        "big,meta-llama/Llama-3.1-8B,50000,800,3,12h,400,,\n"
        "rush,meta-llama/Llama-3.1-8B,50000,800,3,1min,,H100-SXM5-80GB,lora\n"
        "typo,meta-llama/Llama-3.1-8B,1000,512,1,,,H100-SXM9,\n", encoding="utf-8")
    out = tmp_path / "plans.csv"
    rc = main(["plan", "--runs", str(jobs), "--out", str(out), "--gpus", "A100-SXM4-80GB,H100-SXM5-80GB",
               "--max-gpus", "8", "--interval", "0"])
    captured = capsys.readouterr()
    assert rc == 2  # one row with bad input
    rows = {r["id"]: r for r in csv.DictReader(out.open())}
    assert list(rows) == ["small", "big", "rush", "typo"]
    assert rows["small"]["status"] == "planned" and rows["small"]["gpu"] in ("L4-24GB", "A10G-24GB")
    assert rows["small"]["method"] == "lora"
    assert rows["big"]["status"] == "planned" and rows["big"]["gpu"] in ("A100-SXM4-80GB", "H100-SXM5-80GB")
    assert float(rows["big"]["time_s"]) <= 12 * 3600 and float(rows["big"]["cost_usd"]) <= 400
    assert rows["rush"]["status"] == "no-plan" and "deadline" in rows["rush"]["message"]
    assert rows["typo"]["status"] == "error" and "jobs.csv:5" in rows["typo"]["message"]
    assert "H100-SXM5-80GB" in rows["typo"]["message"]
    assert "typo" in captured.err
    # all good -> 0; a no-plan row is an answer -> 0 too
    jobs.write_text("model,examples,tokens_per_example,deadline\nmeta-llama/Llama-3.1-8B,50000,800,1min\n")
    assert main(["plan", "--runs", str(jobs), "--gpus", "H100-SXM5-80GB", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d[0]["status"] == "no-plan"


def test_workload_file_needs_model(capsys, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("examples,tokens_per_example\n100,10\n")
    assert main(["plan", "--runs", str(bad)]) == 2
    assert "bad.csv:1" in capsys.readouterr().err


def test_curve_cli(capsys, tmp_path):
    out = tmp_path / "curve.svg"
    rc = main(["curve", "--model", "Qwen/Qwen-7B", "--gpu", "A100-SXM4-80GB", "--method", "lora", "--seq-len", "1024",
               "--plot", str(out)])
    text = capsys.readouterr().out
    assert rc == 0 and "largest micro-batch that fits" in text
    assert out.read_text().lstrip().startswith("<?xml")
    assert main(["curve", "--model", "Qwen/Qwen-7B", "--gpu", "A100-SXM4-80GB", "--seq-len", "1024", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    pts = d["points"]
    mx = d["max_micro_batch"]
    assert mx >= 1 and pts[mx - 1]["fits"] and not pts[mx]["fits"]
    assert all(p["tokens_per_s"] > 0 for p in pts)
    assert main(["curve", "--model", "Qwen/Qwen-7B", "--gpu", "A10000"]) == 2


def test_master_weights_decide_whether_one_gpu_holds_a_full_fine_tune(capsys):
    base = ["plan", "--model", "meta-llama/Llama-3.1-8B", "--examples", "10000", "--tokens-per-example", "512",
            "--gpus", "H100-SXM5-80GB", "--gpu-counts", "1,2", "--methods", "full", "--interval", "0", "--json",
            "--calibration", "none"]  # the byte counts themselves (a calibration's memory correction aside)
    counts = {}
    for mw in ("fp32", "none"):
        assert main(base + ["--master-weights", mw]) == 0
        counts[mw] = {c["gpus"] for c in json.loads(capsys.readouterr().out)["candidates"]}
    # 8B x 16 bytes/param (fp32 master, fp32 moments) needs two sharded GPUs; 8 bytes/param fit on one
    assert counts["fp32"] == {2} and 1 in counts["none"]
