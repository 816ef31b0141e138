"""pyproject.toml pins a tested upper bound on every dependency, and the installed versions sit inside."""

from __future__ import annotations

import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

requirements = pytest.importorskip("packaging.requirements")
from packaging.version import Version  # noqa: E402  (packaging is pip's own dependency)

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())


def _all_requirements() -> list[str]:
    out = list(PYPROJECT["build-system"]["requires"]) + list(PYPROJECT["project"]["dependencies"])
    for extra in PYPROJECT["project"]["optional-dependencies"].values():
        out.extend(extra)
    return out


@pytest.mark.parametrize("text", _all_requirements())
def test_every_dependency_has_a_tested_upper_bound(text):
    req = requirements.Requirement(text)
    uppers = [s for s in req.specifier if s.operator in ("<", "<=", "~=", "==")]
    lowers = [s for s in req.specifier if s.operator in (">=", ">", "~=", "==")]
    assert uppers and lowers, f"{text}: give a lower and a tested upper bound"
    try:
        installed = Version(version(req.name))
    except PackageNotFoundError:
        pytest.skip(f"{req.name} not installed")
    # a local build tag (torch 2.13.0+cpu) compares as its release
    assert req.specifier.contains(Version(installed.base_version), prereleases=True), (text, str(installed))


def test_peft_bound_matches_the_tested_releases():
    # physics/moe_lora.py knows peft's MoE reach up to the newest tested release; the pin stops before the next
    from tuneplan.specs.peft import PEFT_TESTED_VERSIONS

    peft = next(requirements.Requirement(t) for t in _all_requirements() if t.startswith("peft"))
    newest = Version(PEFT_TESTED_VERSIONS[-1])
    assert peft.specifier.contains(f"{newest.major}.{newest.minor}.99")
    assert not peft.specifier.contains(f"{newest.major}.{newest.minor + 1}.0")
