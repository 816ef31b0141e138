"""`POST /api/from-config`: a dropped or pasted training config read into the page's form fields, with
the used / assumed / ignored lists. Files a config refers to are not opened on the server (they are
reported: drop them too)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from tuneplan.web.respond import jsonable

MAX_CONFIG_FILES = 8
"""Files one request may carry (a training config plus its launcher's accelerate / DeepSpeed files)."""
MAX_CONFIG_CHARS = 500_000
"""Characters per file (the largest published example is ~14 kB)."""
FORM_FIELDS = ("model", "method", "lora_rank", "lora_targets", "adapter_dtype", "trainable_layers", "precision",
               "quant", "optimizer", "galore_rank", "optimizer_impl", "master_weights", "grad_ckpt", "flash_attn", "moe_mode", "moe_experts", "gpus", "nodes",
               "sharding", "tp", "pp", "cp", "ep", "micro_batch", "grad_accum", "grad_accum_sync", "fsdp_adapter_wrap", "examples", "tokens_per_example",
               "tokens", "epochs", "seq_len", "packing", "padding")
"""Form fields a config can fill (the estimate request's names)."""


class ConfigFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Annotated[str, Field(min_length=1, max_length=200)] = Field(
        "pasted.yaml", description="file name (its extension helps tell JSON from YAML)")
    text: Annotated[str, Field(min_length=1, max_length=MAX_CONFIG_CHARS)] = Field(
        ..., description="the file's content, as the framework writes it")


class FromConfigRequest(BaseModel):
    """The user's training config files (a training YAML, and the accelerate / DeepSpeed file it is
    launched with)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "files": [{"name": "qlora.yml", "text": "base_model: NousResearch/Meta-Llama-3-8B\nadapter: qlora\n"
                   "load_in_4bit: true\nlora_r: 32\nmicro_batch_size: 2\nsequence_len: 4096\n"}]}]})
    files: list[ConfigFile] = Field(..., min_length=1, max_length=MAX_CONFIG_FILES)
    format: Annotated[str, Field(max_length=40)] | None = Field(
        None, description="force one format (axolotl, llamafactory, torchtune, trl, litgpt, accelerate, deepspeed)")


def from_config_response(req: FromConfigRequest) -> dict[str, Any]:
    from tuneplan.configs import fill_work, read_config_texts
    from tuneplan.specs.limits import bound_job_field

    cfg = read_config_texts([(f.name, f.text, None) for f in req.files], req.format)
    job = cfg.job_kwargs()
    for key, value in job.items():  # a value beyond its bound is refused here, as `--from` refuses it
        bound_job_field(key, value)
    if job.get("examples") is None and job.get("tokens") is None:
        cfg.notes.extend(fill_work(job, cfg))
    fields: dict[str, Any] = {k: v for k, v in job.items() if k in FORM_FIELDS}
    if "lora_targets" in fields:
        fields["lora_targets"] = ",".join(fields["lora_targets"])
    if cfg.model:
        fields["model"] = cfg.model
    d = cfg.to_dict()
    return {"fields": fields, "formats": cfg.formats, "files": cfg.files, "used": cfg.used(),
            "assumed": cfg.assumed(), "ignored": cfg.ignored_lines(), "detail": d}


def register(app) -> None:
    """Add the route to the app (called by `tuneplan.web.app.create_app`)."""

    @app.post("/api/from-config", tags=["catalogs"], summary="read your training config into the form")
    def from_config(req: FromConfigRequest) -> dict[str, Any]:
        return jsonable(from_config_response(req))
