"""Read a user's own training config (axolotl, LLaMA-Factory, torchtune, TRL / transformers, litgpt,
accelerate, DeepSpeed) into JobSpec keyword arguments, the model id, and the provenance of every value.

YAML is read with `yaml.safe_load` only and any explicit tag is refused; JSON with `json`. Nothing in
a config is imported or run (torchtune `_component_` paths are read as names; a launch script is
refused). A file a config refers to (a DeepSpeed JSON named by `deepspeed:`, accelerate's
`deepspeed_config_file`) is read too, relative to the referring file.
"""

from __future__ import annotations

from pathlib import Path

from tuneplan.configs.base import FORMATS, ConfigError, ConfigRead, Doc
from tuneplan.configs.finish import fill_work, finish
from tuneplan.configs.load import detect_format, load_file
from tuneplan.errors import InputError

__all__ = ["FORMATS", "ConfigError", "ConfigRead", "read_configs", "read_config_texts", "fill_work"]


def _reader(fmt: str):
    from tuneplan.configs import launchers, recipes, rl, trainers

    return {
        "axolotl": trainers.read_axolotl, "llamafactory": trainers.read_llamafactory, "trl": trainers.read_trl,
        "torchtune": recipes.read_torchtune, "litgpt": recipes.read_litgpt,
        "accelerate": launchers.read_accelerate,
        "deepspeed": lambda doc, out, follow: launchers.read_deepspeed(doc, out),
        "verl": rl.read_verl, "nemo-rl": rl.read_nemo_rl, "openrlhf": rl.read_openrlhf,
    }[fmt]


def read_configs(paths: list[str | Path], formats: list[str] | str | None = None) -> ConfigRead:
    """Read config files (in order; a stated value in an earlier file wins over a later one)."""
    texts = []
    for p in paths:
        path = Path(str(p)).expanduser()
        if not path.is_file():
            raise ConfigError(p, "", "no such file" if not path.exists() else "not a file")
        try:
            texts.append((str(p), path.read_bytes(), path.resolve().parent))
        except OSError as exc:
            raise ConfigError(p, "", f"cannot be read ({exc.strerror or exc})") from None
    return read_config_texts(texts, formats)


def read_config_texts(files: list[tuple[str, bytes | str, Path | None]],
                      formats: list[str] | str | None = None) -> ConfigRead:
    """Read configs given as (name, content, folder for the files they refer to, or None: references
    are reported, not followed, as for a pasted or uploaded file)."""
    fmts = _formats(formats, len(files))
    out = ConfigRead()
    seen: set[str] = set()
    missing: list[tuple[str, str, str]] = []
    queue = [(name, content, folder, fmt) for (name, content, folder), fmt in zip(files, fmts, strict=True)]
    while queue:
        name, content, folder, fmt = queue.pop(0)
        key = str((folder / Path(name).name).resolve()) if folder else name
        if key in seen:
            continue
        seen.add(key)
        data, text = load_file(name, content)
        fmt = fmt or detect_format(data, name, text)
        out.files.append(name)
        out.formats.append(fmt)
        label = Path(name).name or name
        follow_up: list = []

        def follow(ref: str, ref_key: str, _name=label, _folder=folder, _fu=follow_up) -> None:
            target = Path(str(ref)).expanduser()
            if _folder is not None and not target.is_absolute():
                target = _folder / target
            if _folder is None or not target.is_file():
                missing.append((_name, ref_key, str(ref)))
                return
            try:
                body = target.read_bytes()
            except OSError as exc:
                raise ConfigError(target, "", f"referred to by {_name}: {ref_key}, cannot be read "
                                              f"({exc.strerror or exc})") from None
            _fu.append((str(target), body, target.resolve().parent, None))

        doc = Doc(data, label, name)
        reader = _reader(fmt)
        if fmt == "torchtune":
            reader(doc, out, follow, text)
        else:
            reader(doc, out, follow)
        queue[:0] = follow_up
    for name, ref_key, ref in missing:
        given = [f for f, k in zip(out.files, out.formats, strict=True) if k in ("deepspeed", "accelerate")]
        tail = f"; {', '.join(given)} (given with --from) is used instead" if given else \
            "; pass it with --from to use it"
        out.ignore(name, ref_key, f"refers to '{ref}', which was not found relative to the file{tail}")
    finish(out)
    return out


def _formats(formats: list[str] | str | None, n: int) -> list[str | None]:
    if not formats:
        return [None] * n
    items = [formats] if isinstance(formats, str) else list(formats)
    for f in items:
        if f not in FORMATS:
            raise InputError("format", f"unknown format '{f}'", FORMATS)
    if len(items) == 1:
        return items * n
    if len(items) != n:
        raise InputError("format", f"give one --format for all files or one per --from ({n}), not {len(items)}")
    return items
