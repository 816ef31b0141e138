"""The README: its two set-up commands exist (CI runs exactly the test one), every `tuneplan`
command and Python example in it runs, and it stays short with links that resolve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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


def bash_blocks() -> list[str]:
    text = (REPO / "README.md").read_text()
    return [c for block in re.findall(r"```bash\n(.*?)\n```", text, re.S) for c in block.splitlines() if c.strip()]


def tuneplan_commands() -> list[list[str]]:
    """Every `tuneplan ...` command of the README (those after `&&` in the set-up lines too)."""
    import shlex

    out = []
    for line in bash_blocks():
        for part in line.split("&&"):
            words = shlex.split(part.strip())
            if words and words[0] == "tuneplan":
                out.append(words[1:])
    return out


def test_readme_has_its_examples():
    cmds = tuneplan_commands()
    assert {c[0] for c in cmds} >= {"estimate", "plan", "data"}
    assert any("--data" in c for c in cmds)
    assert "python tests/sample_data.py demo-data" in bash_blocks()  # what writes the `--data` example


@pytest.fixture(scope="module")
def readme_data(tmp_path_factory):
    """The folder the README's `--data` example runs in: `python tests/sample_data.py demo-data` there."""
    from sample_data import write_all

    folder = tmp_path_factory.mktemp("readme")
    write_all(folder / "demo-data")
    return folder


@pytest.mark.parametrize("argv", tuneplan_commands(), ids=lambda a: " ".join(a[:3]))
def test_every_readme_command_runs(argv, capsys, readme_data, monkeypatch):
    from tuneplan.cli import main

    monkeypatch.chdir(readme_data)

    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.strip()


def test_readme_python_runs():
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)\n```", text, re.S)
    assert blocks
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})  # noqa: S102 - the README's own example


def test_readme_is_short_and_links_resolve():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) < 250
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        assert (REPO / target).exists(), target
