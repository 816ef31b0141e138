"""The README's two set-up commands exist, and CI runs exactly the test one."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def setup_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)\n```", section, re.S)


def test_exactly_two_setup_commands():
    cmds = setup_commands()
    assert len(cmds) == 2
    assert cmds[0].startswith("pip install -e . && tuneplan estimate ")
    assert "pytest" in cmds[1]


def test_ci_runs_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text()
    assert setup_commands()[1] in ci
    assert '"$rc" -eq 5' in ci  # pytest's "no tests collected" is handled


def test_main_job_command_parses():
    from tuneplan.cli import build_parser

    args = setup_commands()[0].split("&&", 1)[1].split()[1:]
    ns = build_parser("estimate").parse_args(args)
    assert ns.model == "meta-llama/Llama-3.1-8B" and ns.gpus == 4
