"""The model catalog: config.json files shipped in `tuneplan/data/models`, their aliases, name resolution.

Names are resolved without parsing every file: the catalog index comes from the file names
(`org__name.json` <-> Hub id `org/name`, checked against `_hf_id` by the tests), ALIASES.md is parsed
once, and only the resolved model's JSON is read. Nothing heavy (pandas, torch, transformers) is
imported here; `huggingface_hub` only when a name is not in the catalog.

Resolution order for a name (case-insensitive throughout):
1. a path to a config.json, or a folder holding one (the user's own config; source = the path);
2. a catalog Hub id, an ALIASES.md id, or a short name without the org (a re-upload under another
   org resolves by its short name);
3. checkpoint-name variants: quantisation suffixes (-Int4, -Int8, -AWQ, -GPTQ, -bnb-4bit: these set
   `quant`), -fp16/-bf16, chat/instruct suffixes (-Chat, -Instruct, -it, -hf, -base, -pt), the
   `Meta-Llama-` prefix, and the catalog's own suffixes (-hf, -base, -Base, -it, -Instruct);
4. a unique catalog name that starts with the given name followed by "-" (several: AmbiguousNameError);
5. for an `org/name` id, the Hugging Face Hub (config.json only) when `huggingface_hub` is installed;
6. otherwise UnknownNameError with the closest catalog names.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from tuneplan.errors import (
    AmbiguousNameError,
    DataFileError,
    InputError,
    UnknownNameError,
    closest,
    parse_user_json,
    read_user_bytes,
    read_user_text,
    shown,
)
from tuneplan.specs.architectures import (
    UNSUPPORTED,
    detect_model_type,
    looks_llama_like,
    model_from_config,
    split_quant_suffix,
)
from tuneplan.specs.architectures.base import inferred_values
from tuneplan.specs.limits import MAX_CONFIG_FILE_BYTES, check_name
from tuneplan.specs.model import ModelSpec

MODELS_DIR = Path(__file__).resolve().parent.parent / "data" / "models"  # The catalog's folder.
ALIASES_FILE = MODELS_DIR / "ALIASES.md"
FIELD = "model"

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[A-Za-z0-9][\w.\-]*$")
# suffixes stripped from checkpoint names (case-insensitive), and the ones the catalog files carry
_STRIP_SUFFIXES = ("-chat", "-instruct", "-it", "-hf", "-base", "-pt", "-fp16", "-bf16", "-fp32")
_ADD_SUFFIXES = ("-hf", "-base", "-it", "-instruct")
_QUANT_WORDS = {"gptq": "gptq-int4", "awq": "awq-int4", "aqlm": "aqlm-2bit", "int4": "gptq-int4",
                "int8": "int8", "nf4": "nf4", "bnb": "nf4"}


# ----------------------------------------------------------------------------------------------------
# catalog index and aliases


@lru_cache(maxsize=1)
def model_catalog() -> dict[str, Path]:
    """Canonical Hub id (the file's `_hf_id`, e.g. "meta-llama/Llama-3.1-8B") -> config file, by file name."""
    return {p.stem.replace("__", "/", 1): p for p in sorted(MODELS_DIR.glob("*.json"))}


@dataclass(frozen=True)
class Alias:
    """An ALIASES.md row: another Hub id that uses a catalog file's shapes."""

    alias: str
    target: str  # canonical catalog id
    kind: str  # "exact", "quantized" or "look-alike"
    quant: str = "none"
    note: str = ""
    overrides: tuple[tuple[str, int], ...] = ()


def _expand_alias_cell(cell: str) -> list[str]:
    """`a/B(-Instruct), C` -> ["a/B", "a/B-Instruct", "a/C"]; drops commentary and wildcards."""
    ids: list[str] = []
    org = ""
    for part in re.split(r"[,;](?![^()]*\))", cell.replace("`", "")):  # commas outside parentheses
        part = part.strip()
        m = re.match(r"^([A-Za-z0-9][\w.\-/*]*)(\((-[^)\s]+)\))?(.*)$", part)
        if not m:
            continue
        base, attached, rest = m.group(1), m.group(3), m.group(4).strip()
        if "*" in base:
            continue  # wildcards ("granite-3.0-*-instruct") are covered by the suffix rules
        if "/" in base:
            org = base.split("/", 1)[0]
        elif org:
            base = f"{org}/{base}"
        else:
            continue
        ids.append(base)
        if attached:
            ids.append(base + attached)
        extra = re.match(r"^\(and ((?:-[\w.\-]+(?:,\s*)?)+)\)", rest)
        if extra:
            stem = base.rsplit("-", 1)[0]
            ids.extend(stem + s.strip() for s in extra.group(1).split(",") if s.strip())
    return ids


def _quant_from_text(text: str) -> str:
    low = text.lower()
    for word, q in _QUANT_WORDS.items():
        if word in low:
            if word == "gptq" and "int8" in low:
                return "gptq-int8"
            return q
    return "none"


@lru_cache(maxsize=1)
def model_aliases() -> dict[str, Alias]:
    """Lower-cased alias id -> Alias, parsed from ALIASES.md (cached)."""
    catalog = model_catalog()
    by_file = {path.name: hub_id for hub_id, path in catalog.items()}
    out: dict[str, Alias] = {}
    if not ALIASES_FILE.exists():
        return out
    section = ""
    catalog_lower = {c.lower() for c in catalog}
    for lineno, line in enumerate(ALIASES_FILE.read_text(encoding="utf-8").splitlines(), start=1):
        s = line.strip()
        if s.startswith("#"):
            low = s.lower()
            section = ("quantized" if "quantiz" in low or "quantis" in low else
                       "look-alike" if "look-alike" in low or "not exact" in low else
                       "exact" if "alias" in low else section)
            continue
        if not s.startswith("|") or not section:
            continue
        cells = [c.strip() for c in s.strip("|").split("|")]
        if len(cells) < 3 or set(cells[0]) <= set("-: ") or cells[0].lower() in ("alias", "alias (hub id)", "name"):
            continue
        fm = re.search(r"([\w.\-]+__[\w.\-]+\.json)", cells[1])
        if not fm:
            continue
        target = by_file.get(fm.group(1))
        if target is None:
            raise DataFileError(str(ALIASES_FILE), lineno, f"unknown model file '{fm.group(1)}'")
        quant = _quant_from_text(cells[2]) if section == "quantized" else "none"
        note = cells[2] if section == "look-alike" else ""
        overrides: list[tuple[str, int]] = []
        if section == "look-alike" and "(own file)" not in cells[1]:
            om = re.match(r"^(?:same:\s*)?(vocab_size|seq_length|context)\s+(\d+)", cells[2])
            if om:
                key = {"context": "max_position_embeddings"}.get(om.group(1), om.group(1))
                overrides.append((key, int(om.group(2))))
        for alias_id in _expand_alias_cell(cells[0]):
            key = alias_id.lower()
            if key in catalog_lower and not overrides:
                continue  # a catalog file's own row
            prev = out.get(key)
            if prev is not None and prev.kind == "exact" and section != "quantized":
                continue  # first (exact) mapping wins
            out[key] = Alias(alias_id, target, section, quant, note, tuple(overrides))
    return out


@lru_cache(maxsize=1)
def _full_index() -> dict[str, str]:
    """Lower full id -> canonical id, of the catalog files alone (a catalog id is found without
    parsing ALIASES.md)."""
    return {hub_id.lower(): hub_id for hub_id in model_catalog()}


@lru_cache(maxsize=1)
def _short_index() -> dict[str, list[str]]:
    """Lower short name (no org) -> the catalog and alias ids (as written) that have it."""
    short: dict[str, list[str]] = {}
    for hub_id in [*model_catalog(), *(al.alias for al in model_aliases().values())]:
        short.setdefault(hub_id.split("/")[-1].lower(), []).append(hub_id)
    return short


# ----------------------------------------------------------------------------------------------------
# loading


@lru_cache(maxsize=256)
def _read_json(path: str, stamp: int = 0) -> dict:
    """A JSON object from `path` (cached per path and modification time `stamp`)."""
    data = parse_user_json(read_user_text(path, FIELD, "config.json", MAX_CONFIG_FILE_BYTES), FIELD, path)
    if not isinstance(data, dict):
        raise InputError(FIELD, f"'{path}' must hold a JSON object (a config.json)")
    return data


@dataclass(frozen=True)
class _Resolved:
    name: str  # canonical catalog id, or the path / hub id for outside configs
    path: str  # config file
    source: str
    quant: str = "none"
    requested: str = ""
    via: str = ""
    alias_note: str = ""
    overrides: tuple[tuple[str, int], ...] = ()
    stamp: int = 0  # modification time of a user's config file (cache key)


def _config_of(r: _Resolved) -> dict:
    cfg = dict(_read_json(r.path, r.stamp))
    for key, value in r.overrides:
        if key == "vocab_size" and "padded_vocab_size" in cfg:
            cfg["padded_vocab_size"] = value
        cfg[key] = value
    return cfg


@lru_cache(maxsize=512)
def _spec_of(r: _Resolved) -> ModelSpec:
    spec = model_from_config(_config_of(r), r.name, r.source)
    how = {"requested": r.requested if r.requested != r.name else "", "resolved_via": r.via,
           "alias_note": r.alias_note, "alias_overrides": dict(r.overrides)}
    extra = {**spec.extra, **{k: v for k, v in how.items() if v}}
    return replace(spec, quant=r.quant if r.quant != "none" else spec.quant, extra=extra)


# ----------------------------------------------------------------------------------------------------
# resolution


def _catalog_resolved(canonical: str, quant: str, requested: str, via: str, note: str = "",
                      overrides: tuple[tuple[str, int], ...] = ()) -> _Resolved:
    path = model_catalog()[canonical]
    return _Resolved(canonical, str(path), f"catalog:{path.name}", quant, requested, via, note, overrides)


def _lookup_exact(name: str, quant: str, requested: str, via: str) -> _Resolved | None:
    """Catalog id, alias id, or a unique short name (of the catalog or the aliases)."""
    low = name.lower()
    full = _full_index()
    if low in full:
        return _catalog_resolved(full[low], quant, requested, via)
    if not low or "/" in low.split("/", 1)[-1]:
        return None
    al = model_aliases().get(low)
    if al is not None:
        q = al.quant if al.quant != "none" else quant
        return _catalog_resolved(al.target, q, requested, via or f"alias ({al.kind})", al.note, al.overrides)
    hits = _short_index().get(low.split("/")[-1], [])
    if not hits:
        return None
    targets = {_target_of(written) for written in hits}
    if len(targets) == 1:
        return _lookup_exact(hits[0], quant, requested, via or "short name")
    raise AmbiguousNameError(FIELD, requested or name, sorted(targets))


def _target_of(written: str) -> str:
    """The canonical catalog id of a catalog or alias id."""
    low = written.lower()
    al = model_aliases().get(low)
    return _full_index().get(low) or (al.target if al else written)


def _strip_edits(cur: str) -> list[str]:
    """One edit: drop a chat/instruct/precision suffix (or -Chat/-Instruct infix), swap Meta-Llama-."""
    low = cur.lower()
    org, _, short = cur.rpartition("/")
    prefix = f"{org}/" if org else ""
    out: list[str] = []
    for suf in _STRIP_SUFFIXES:
        if low.endswith(suf) and len(short) > len(suf):
            out.append(cur[: -len(suf)])
        if suf in ("-chat", "-instruct"):
            m = re.search(re.escape(suf) + r"(?=-)", short, flags=re.IGNORECASE)
            if m:  # an infix, as in Mixtral-8x7B-Instruct-v0.1
                out.append(prefix + short[: m.start()] + short[m.end():])
    if short.lower().startswith("meta-llama-"):
        out.append(prefix + short[len("meta-"):])
    elif short.lower().startswith("llama-"):
        out.append(prefix + "Meta-" + short)
    return out


def _variants(name: str) -> list[str]:
    """Checkpoint-name variants, fewest edits first: stripped forms, then catalog suffixes added."""
    by_edits: dict[str, int] = {name: 0}
    for depth in range(1, 4):
        for cur in [c for c, edits in by_edits.items() if edits == depth - 1]:
            for cand in _strip_edits(cur):
                by_edits.setdefault(cand, depth)
    for cand, edits in list(by_edits.items()):
        for suf in _ADD_SUFFIXES:
            added = cand + suf
            if not cand.lower().endswith(suf) and added not in by_edits:
                by_edits[added] = edits + 1
    ordered = sorted(by_edits.items(), key=lambda kv: kv[1])
    return [c for c, edits in ordered if edits > 0]


def _prefix_matches(name: str) -> set[str]:
    """Canonical ids whose (catalog or alias) short name starts with `name` + '-'.

    A name with an org only matches ids of the same org (another org's model of a similar name is
    a different model, e.g. ibm/granite-20b is not ibm-granite/granite-20b-code-base). When catalog
    files match, aliases are not counted (Qwen3-30B is the Qwen3-30B-A3B file, not the -2507 aliases).
    """
    org, _, q = name.lower().rpartition("/")
    out: set[str] = set()
    own: set[str] = set()  # catalog files' own names win over aliases that share a file's shapes
    for s, hits in _short_index().items():
        for written in hits:
            if s.startswith(q + "-") and (not org or written.lower().split("/")[0] == org):
                out.add(_target_of(written))
                if written.lower() in _full_index():
                    own.add(_target_of(written))
    return own or out


def _resolve_catalog(name: str) -> _Resolved | None:
    requested = name
    base, quant = split_quant_suffix(name)
    for cand in [name, base, *_variants(base)]:
        hit = _lookup_exact(cand, quant, requested, "" if cand in (name, base) else f"variant {cand}")
        if hit is not None:
            if hit.quant == "none" and quant != "none":
                hit = replace(hit, quant=quant)
            return hit
    matches = _prefix_matches(base)
    if len(matches) == 1:
        canonical = next(iter(matches))
        return _catalog_resolved(canonical, quant, requested, f"unique prefix of {canonical}")
    if len(matches) > 1:
        raise AmbiguousNameError(FIELD, requested, sorted(matches))
    return None


def _as_path(name: str) -> Path | None:
    """The config.json a name is a path to (a file, or a folder holding one); None for a name that is
    not a path; InputError for a path to nothing, or to something that is not a readable file."""
    check_name(FIELD, name)
    p = Path(os.path.expanduser(name))
    try:
        if p.is_dir():
            p = p / "config.json"
            if not p.is_file():
                raise InputError(FIELD, f"folder '{name}' holds no config.json")
        if p.is_file():
            return p
        if p.exists():  # a FIFO or a device: reading it would block
            read_user_bytes(p, FIELD, "config.json")  # refuses it without reading
    except OSError as exc:  # a name too long for the file system, a path through a file...
        raise InputError(FIELD, f"'{shown(name)}' is not a readable path nor a catalog name: "
                                f"{exc.strerror or exc}") from None
    if name.lower().endswith(".json") or name.startswith((".", "/", "~", "\\")) or (
            os.sep != "/" and os.sep in name) or name.count("/") > 1:
        raise InputError(FIELD, f"no such config file or folder: '{name}'")
    return None


def _hub_reachable(timeout: float = 3.0) -> bool:
    import socket
    from urllib.parse import urlparse

    try:
        from huggingface_hub import constants

        url = urlparse(constants.ENDPOINT)
    except Exception:  # noqa: BLE001 - any import/attribute problem means no usable Hub
        return False
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "huggingface.co", port), timeout=timeout):
            return True
    except OSError:
        return False


def hub_cache_dir() -> Path:
    """Where fetched config.json files are kept: `$TUNEPLAN_HOME/hub` (default `~/.tuneplan/hub`)."""
    return Path(os.environ.get("TUNEPLAN_HOME") or str(Path.home() / ".tuneplan")) / "hub"


_PASS_PATH = "pass --model path/to/config.json"


def _hub_config(repo_id: str) -> tuple[str | None, str]:
    """(path to a downloaded / cached config.json, "") or (None, the one-line hint of why not). Only
    config.json is fetched (never weights, never code), into `hub_cache_dir()`."""
    import importlib.util

    if importlib.util.find_spec("huggingface_hub") is None:
        return None, ("not in the catalog; pip install 'tuneplan[hub]' to fetch its config.json from the Hugging "
                      f"Face Hub, or {_PASS_PATH}")
    try:
        from huggingface_hub import hf_hub_download
    except Exception:  # noqa: BLE001
        return None, f"not in the catalog; huggingface_hub cannot be imported; {_PASS_PATH}"
    offline = f"the Hugging Face Hub cannot be reached and the model is not in the catalog; {_PASS_PATH}"
    cache = str(hub_cache_dir())
    try:
        return hf_hub_download(repo_id, "config.json", local_files_only=True, cache_dir=cache), ""
    except Exception:  # noqa: BLE001 - not cached; try the network below
        pass
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes") or not _hub_reachable():
        return None, offline
    try:
        return hf_hub_download(repo_id, "config.json", etag_timeout=5, cache_dir=cache), ""
    except Exception as exc:  # noqa: BLE001 - classify by name, the classes move between versions
        kinds = {c.__name__ for c in type(exc).__mro__}
        if "GatedRepoError" in kinds:
            why = "; gated on the Hub (log in with a token that has access, or pass its config.json)"
        elif "RepositoryNotFoundError" in kinds:
            why = " and not found on the Hub either"
        elif "RemoteEntryNotFoundError" in kinds or "EntryNotFoundError" in kinds and \
                "LocalEntryNotFoundError" not in kinds:
            why = "; the Hub repository has no config.json"
        else:
            return None, offline
        return None, f"not in the catalog{why}; {_PASS_PATH}"


class UnknownModelError(UnknownNameError):
    """A model name that resolves to nothing; lists the closest catalog names (by short name too)."""

    def __init__(self, name: str, hint: str = "") -> None:
        ids = list(model_catalog())
        short_map = {i.split("/")[-1]: i for i in ids}
        by_short = [short_map[s] for s in closest(name.split("/")[-1], list(short_map))]
        self._named(FIELD, "model", name, list(dict.fromkeys(closest(name, ids) + by_short))[:5], hint)


def _resolve(name_or_path: str, *, hub: bool = True) -> _Resolved:
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise InputError(FIELD, "empty model name")
    name = name_or_path.strip()
    path = _as_path(name)
    if path is not None:
        label = path.resolve().parent.name if path.name == "config.json" else path.stem
        try:
            stamp = path.stat().st_mtime_ns
        except OSError:
            stamp = 0
        return _Resolved(label or str(path), str(path), str(path), split_quant_suffix(label)[1], name,
                         "path", stamp=stamp)
    hit = _resolve_catalog(name)
    if hit is not None:
        return hit
    hint = f"not in the catalog; {_PASS_PATH}"
    if hub and _HUB_ID.match(name):
        got, hint = _hub_config(name)
        if got is not None:
            return _Resolved(name, got, f"hub:{name}", split_quant_suffix(name)[1], name,
                             f"config.json fetched from the Hugging Face Hub (no weights, no code), cached at {got}")
    raise UnknownModelError(name, hint)


def resolve_model(name_or_path: str) -> ModelSpec:
    """A ModelSpec for a catalog name, alias, checkpoint variant, config path/folder or Hub id."""
    return _spec_of(_resolve(name_or_path))


def load_model_config(name_or_path: str) -> dict:
    """The raw config dict of the resolved model (no underscore keys), for transformers AutoConfig: the
    catalog's inferred values fill absent keys, look-alike alias overrides apply, a `model_type` is added
    only for a plainly llama-like (or Falcon "RW") config, and the keys transformers would default otherwise
    than `model_from_config` reads them are set: Falcon grouped-KV `new_decoder_architecture`/`num_kv_heads`,
    Granite-4.0-H's 9:1 Mamba/attention `layer_types`, a flat Gemma-3 config as `gemma3_text`."""
    r = _resolve(name_or_path)
    raw = _config_of(r)
    out = {k: v for k, v in raw.items() if not k.startswith("_")}
    out.update({k: v for k, v in inferred_values(raw).items() if out.get(k) is None})
    mt = detect_model_type(out)
    if not out.get("model_type"):
        if looks_llama_like(raw):
            out["model_type"] = "llama"
            out.setdefault("architectures", ["LlamaForCausalLM"])
        elif mt == "falcon":
            out["model_type"] = "falcon"
    if mt == "falcon":
        nkv = out.get("num_kv_heads", out.get("num_key_value_heads"))
        nh = out.get("num_attention_heads", out.get("n_head"))
        if isinstance(nkv, int) and nkv not in (1, nh) and "new_decoder_architecture" not in out:
            out["new_decoder_architecture"] = True
        if isinstance(nkv, int):
            out.setdefault("num_kv_heads", nkv)
    elif mt == "granitemoehybrid" and "layer_types" not in out:
        spec = _spec_of(r)
        if "layer_types" in spec.extra:
            out["layer_types"] = list(spec.extra["layer_types"])
    elif mt == "gemma3" and "text_config" not in out and "hidden_size" in out:
        out["model_type"] = "gemma3_text"
        out["architectures"] = ["Gemma3ForCausalLM"]
    return out


_MPT_NOTES = re.compile(r"MPT arch d_model=(\d+) n_layers=(\d+) n_heads=(\d+) vocab=(\d+)")


def model_from_run_notes(model: str, notes: str, seq_len: float | None) -> ModelSpec | None:
    """A run row whose notes state its architecture (llm-foundry's MPT recipe sizes: d_model,
    n_layers, n_heads, vocab, learned position embeddings) -> a spec built from those figures and
    the MPT family's fixed choices (expansion ratio 4, no biases), as in mosaicml__mpt-7b.json."""
    m = _MPT_NOTES.search(notes or "")
    if not m:
        return None
    d, layers, heads, vocab = (int(x) for x in m.groups())
    learned = "learned pos-emb" in notes
    cfg = {"model_type": "mpt", "d_model": d, "n_layers": layers, "n_heads": heads, "expansion_ratio": 4,
           "vocab_size": vocab, "max_seq_len": int(seq_len or 2048), "no_bias": True,
           "attn_config": {"alibi": not learned}}
    return model_from_config(cfg, model, source="architecture stated in the run's notes")


def resolve_run_model(model: str, model_hf_id: str, notes: str = "", seq_len: float | None = None,
                      config_json: str = "") -> ModelSpec:
    """The ModelSpec of a reference-run row: its stored config.json (`model_config_json`, written by
    TuneplanCallback and `tuneplan profile`: the model that ran, whatever its name) first, then
    `model_hf_id`, then `model` (no Hub look-up), then an architecture stated in the row's notes."""
    if config_json and str(config_json).strip():
        return _row_config_model(str(config_json), model or model_hf_id)
    try:
        return _resolve_run_model(model, model_hf_id)
    except InputError:
        spec = model_from_run_notes(model, notes, seq_len) if notes else None
        if spec is None:
            raise
        return spec


@lru_cache(maxsize=64)
def _row_config_model(config_json: str, name: str) -> ModelSpec:
    """A row's stored config.json -> its ModelSpec (InputError naming model_config_json when unreadable)."""
    import json

    try:
        cfg = json.loads(config_json)
    except (ValueError, RecursionError):
        raise InputError("model_config_json", "is not valid JSON") from None
    if not isinstance(cfg, dict):
        raise InputError("model_config_json", f"must be a JSON object, got {type(cfg).__name__}")
    return model_from_config(cfg, name.strip() or str(cfg.get("_name_or_path") or "") or "model",
                             source="the row's model_config_json")


def _resolve_run_model(model: str, model_hf_id: str) -> ModelSpec:
    tried: list[str] = []
    first_error: InputError | None = None
    for raw in (model_hf_id, model):
        if not isinstance(raw, str):
            continue
        cand = re.sub(r"\s*\(.*?\)\s*$", "", raw.strip()).rstrip("?").strip()
        if not cand or cand in tried:
            continue
        tried.append(cand)
        try:
            return _spec_of(_resolve(cand, hub=False))
        except AmbiguousNameError:
            raise
        except InputError as exc:
            first_error = first_error or exc
    if not tried:
        raise InputError(FIELD, "the row names no model (model and model_hf_id are empty)")
    if len(tried) == 1 and first_error is not None:
        raise first_error
    raise UnknownModelError(" / ".join(tried), "no config for it in the catalog")


def list_models() -> list[ModelSpec]:
    """Every catalog model tuneplan can read (parses all files: for `tuneplan models`, not for a single
    estimate); files of architectures no reader describes (`architectures.UNSUPPORTED`) are left out."""
    return [_spec_of(_catalog_resolved(hub_id, "none", "", "")) for hub_id, path in model_catalog().items()
            if detect_model_type(_read_json(str(path))) not in UNSUPPORTED]
