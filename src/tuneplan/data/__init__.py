"""The shipped data files (catalogs, prices, frameworks, the default calibration).

`read_text(*parts)` reads one from the package's directory: importlib.resources would cost every
start-up ~15 ms of imports (zipfile, shutil, urllib...), so it is used only when the package is not a
plain directory (a zipped install)."""

from __future__ import annotations

import os

DIR = os.path.dirname(os.path.abspath(__file__))
"""This package's directory: where the data files lie in an ordinary install."""


def read_text(*parts: str) -> str:
    """The text (UTF-8) of the shipped file data/<parts...>; FileNotFoundError when there is none."""
    try:
        with open(os.path.join(DIR, *parts), encoding="utf-8") as f:
            return f.read()
    except (FileNotFoundError, NotADirectoryError):
        if os.path.isdir(DIR):
            raise
    from importlib import resources

    return resources.files("tuneplan.data").joinpath(*parts).read_text(encoding="utf-8")


def load_yaml(*parts: str):
    """The content of the shipped YAML file data/<parts...>, parsed safely by PyYAML (with libyaml's
    loader when PyYAML was built with it: ~10x faster, and frameworks.yaml is read by every estimate)."""
    import yaml

    return yaml.load(read_text(*parts), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
