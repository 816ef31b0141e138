"""`POST /api/data`: an uploaded dataset file (multipart form: `file`, optionally a `tokenizer` file, a
tokenizer.json) read as `tuneplan data` reads it: token counts, the length histogram, what the collator
does, and the form fields it fills (examples, tokens per example, and the sequence length of the longest
batch, so the estimate's memory is the worst batch's). The file is copied to a temporary folder, read,
and deleted; its size is bounded by UPLOAD_LIMITS (the body limit of this route)."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from typing import Annotated, Any

from fastapi import File, Form, UploadFile

from tuneplan.errors import InputError
from tuneplan.web.respond import RequestError, compute, jsonable

MAX_UPLOAD_BYTES = 64 * 1024 * 1024
"""The largest request body of an upload: a dataset of tens of thousands of examples (a larger one is read
by `tuneplan data` or `--data` on the command line, streamed)."""
UPLOAD_LIMITS = {"/api/data": MAX_UPLOAD_BYTES}
"""Routes whose body limit is not the API's default (the body-limit middlewares read it)."""
SUFFIXES = (".jsonl", ".ndjson", ".json", ".csv", ".parquet", ".pq")


def _save(upload, folder: Path, default: str, allowed: tuple[str, ...]) -> Path:
    """The upload copied into `folder` under a safe name keeping its suffix (which tells the file type)."""
    name = Path(upload.filename or default).name
    suffix = Path(name).suffix.lower()
    if suffix not in allowed:
        raise InputError("file", f"unknown file type '{suffix or '(none)'}' of {name!r}", allowed)
    target = folder / (re.sub(r"[^A-Za-z0-9_.-]", "_", Path(name).stem)[:80] + suffix)
    with target.open("wb") as out:
        shutil.copyfileobj(upload.file, out, 1 << 20)
    return target


def data_response(path: Path, tokenizer: Path | None, *, data_format: str | None, micro_batch: int | None,
                  seq_len: int | None, padding: str | None, packing: bool, group_by_length: bool,
                  framework: str | None, skip_bad_rows: bool) -> dict[str, Any]:
    """The summary and collator of a saved upload, and the estimate form's fields."""
    from tuneplan.corpus.summary import summarise
    from tuneplan.integrations.dataset import data_collation
    from tuneplan.specs.job import make_job

    s = summarise(path, shape=data_format, tokenizer=str(tokenizer) if tokenizer else None,
                  skip_bad_rows=skip_bad_rows)
    job = make_job(seq_len=seq_len, micro_batch=micro_batch, padding=padding, packing=packing or None,
                   framework=framework)
    col, _, _ = data_collation(s, job, group_by_length=group_by_length)
    fields = {"examples": s.examples, "tokens_per_example": round(col.real_tokens / s.examples, 1),
              "seq_len": col.batch_len_max}
    out = s.to_dict() | {"collator": col.to_dict(), "fields": fields}
    out["path"] = path.name  # not the server's temporary folder
    return out


def multipart_installed() -> bool:
    """Whether FastAPI can parse a multipart form (the python-multipart package, the `web` extra)."""
    import importlib.util

    return any(importlib.util.find_spec(m) is not None for m in ("python_multipart", "multipart"))


def register(app) -> None:
    """Add the route to the app (called by `tuneplan.web.app.create_app`). Without python-multipart the
    route answers 422 saying what to install (FastAPI refuses to declare a form route without it)."""
    if not multipart_installed():
        @app.post("/api/data", tags=["data"], summary="an uploaded dataset (needs python-multipart)")
        def data_unavailable() -> dict[str, Any]:
            raise RequestError([], "uploads need the python-multipart package: pip install 'tuneplan[web]'",
                               kind="unavailable")

        return

    @app.post("/api/data", tags=["data"], summary="an uploaded dataset: token counts, lengths, collator")
    def data_endpoint(file: Annotated[UploadFile, File(description="JSONL, JSON, CSV or Parquet")],
                      tokenizer: Annotated[UploadFile | None, File(description="a tokenizer.json")] = None,
                      data_format: Annotated[str | None, Form(max_length=40)] = None,
                      micro_batch: Annotated[int | None, Form(ge=1, le=4096)] = None,
                      seq_len: Annotated[int | None, Form(ge=1, le=10_000_000)] = None,
                      padding: Annotated[str | None, Form(max_length=20)] = None,
                      packing: Annotated[bool, Form()] = False,
                      group_by_length: Annotated[bool, Form()] = False,
                      framework: Annotated[str | None, Form(max_length=60)] = None,
                      skip_bad_rows: Annotated[bool, Form()] = False) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="tuneplan-upload-") as tmp:
            folder = Path(tmp)
            # the server's folder is no business of the page's
            unhide = re.compile(f"{re.escape(str(folder / 'tok'))}/|{re.escape(str(folder))}/").sub
            path = _save(file, folder, "data.jsonl", SUFFIXES)
            tok = None
            if tokenizer is not None and tokenizer.filename:
                (folder / "tok").mkdir()
                tok = _save(tokenizer, folder / "tok", "tokenizer.json", (".json",))
            try:
                out = compute(lambda: data_response(
                    path, tok, data_format=data_format or None, micro_batch=micro_batch, seq_len=seq_len,
                    padding=padding or None, packing=packing, group_by_length=group_by_length,
                    framework=framework or None, skip_bad_rows=skip_bad_rows))
            except InputError as exc:
                text = str(exc).removeprefix(f"{exc.field}: ").split(" (allowed: ")[0]
                raise InputError(exc.field, unhide("", text), exc.allowed) from None
            out["tokens_source"] = unhide("", out["tokens_source"])
            return jsonable(out)
