"""tuneplan.specs.record (JobSpec's validation without pydantic) against pydantic itself: every JobSpec
field's type coerces each value as pydantic's lax mode does (same value, or the same error type), and
the record keeps the BaseModel API its users call."""

from __future__ import annotations

import copy
import math
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuneplan.errors import InputError
from tuneplan.specs.job import JobSpec, make_job
from tuneplan.specs.record import RecordError, _Bad, coercer

pydantic = pytest.importorskip("pydantic")

VALUES = [
    0, 1, 2, -1, 4, 10**6, 10**30, True, False, 0.0, 1.0, 2.0, 2.5, -3.0, 1e20, math.inf, -math.inf, math.nan,
    "", " ", "0", "1", "2", "4", " 4 ", "+5", "-5", "4.0", "4.", "4.5", "1_000", "_1", "1__0", "1e3", "0x10",
    "inf", "-inf", "nan", "Infinity", "true", "True", "TRUE", "yes", "Y", "on", "off", "f", "no", "n", "2 ",
    "lora", "full", "LoRA", "bf16", "adamw", "ddp", "sft", "max", "fp32", "auto", "ring", "hf", "none",
    b"7", b"lora", b"\xff", None, [], (), ["q", "v"], ("q",), ("q", 1), {"q"}, {"a": 1}, [["r", "8"]],
    [("r", "8"), ("alpha", "16")], [("r",)], [("r", "8", "x")], object(),
]
"""Values a config file, the web API or a caller can hand a JobSpec field."""


def _theirs(annotation, v):
    try:
        return ("ok", pydantic.TypeAdapter(annotation).validate_python(v))
    except pydantic.ValidationError as exc:
        return ("err", exc.errors()[0]["type"], exc.errors()[0]["loc"])


def _ours(annotation, v):
    try:
        return ("ok", coercer(annotation)(v))
    except _Bad as bad:
        return ("err", bad.kind, bad.loc)


def _same(a, b) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "err":
        return a[1:] == b[1:]
    x, y = a[1], b[1]
    if isinstance(x, float) and math.isnan(x):
        return isinstance(y, float) and math.isnan(y)
    return x == y and type(x) is type(y)


ANNOTATIONS = {str(f.annotation): f.annotation for f in JobSpec.model_fields.values()}


@pytest.mark.parametrize("shown", sorted(ANNOTATIONS))
def test_every_field_type_coerces_as_pydantic(shown):
    annotation = ANNOTATIONS[shown]
    bad = [(v, _theirs(annotation, v), _ours(annotation, v)) for v in VALUES
           if not _same(_theirs(annotation, v), _ours(annotation, v))]
    assert not bad, bad


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.integers(), st.floats(), st.booleans(), st.text(max_size=8).filter(lambda s: "-" not in s),
                 st.from_regex(r"\A\s?[+-]?[0-9_.eE]{0,6}\s?\Z")))
def test_scalars_coerce_as_pydantic(v):
    """(A sign inside the digits is left out: pydantic-core reads '0-1' as -1, a quirk not copied.)"""
    for annotation in (int, float, bool, str, int | None, float | None, bool | None):
        assert _same(_theirs(annotation, v), _ours(annotation, v)), (annotation, v)


def test_model_api():
    j = make_job(method="lora", examples=1000, seq_len=512, lora_targets="q,v", framework="generic")
    assert j.model_fields_set == {"method", "examples", "seq_len", "lora_targets", "framework"}
    # no framework given: hf-trainer's profile fills the settings it decides (specs/job.py _framework_defaults)
    hf = make_job(method="lora", examples=1000, seq_len=512, lora_targets="q,v")
    assert {"framework", "padding", "optimizer_impl", "moe_experts"} <= hf.model_fields_set
    assert hf.framework == "hf-trainer"
    assert j.lora_targets == ("q", "v") and j.examples == 1000.0 and isinstance(j.examples, float)
    d = j.model_dump()
    assert list(d) == list(JobSpec.model_fields) and JobSpec(**d) == j
    c = j.model_copy(update={"micro_batch": 8})
    assert c.micro_batch == 8 and j.micro_batch == 4 and "micro_batch" in c.model_fields_set
    assert hash(make_job(method="lora", examples=1000, seq_len=512, lora_targets="q,v", framework="generic")) == hash(j)
    assert pickle.loads(pickle.dumps(j)) == j and copy.deepcopy(j) == j
    assert pickle.loads(pickle.dumps(j)).model_fields_set == j.model_fields_set
    with pytest.raises(RecordError):
        j.micro_batch = 2
    assert repr(j).startswith("JobSpec(method='lora', lora_rank=16, lora_targets=('q', 'v'),")
    f = JobSpec.model_fields["micro_batch"]
    assert f.default == 4 and f.annotation is int and f.json_schema_extra["group"] == "parallelism"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"micro_batch": 0}, "micro-batch: must be a positive integer"),
    ({"micro_batch": 2.5}, "micro-batch: '2.5' is not a valid integer"),
    ({"method": "zz"}, "method: unknown value 'zz' (allowed: full, lora,"),
    ({"grad_ckpt": "zz"}, "grad-ckpt: unknown mode 'zz' (allowed: none, selective, full, offload)"),
    ({"gpus": 3, "nodes": 2}, "job: gpus (3) must be divisible by nodes (2)"),
    ({"lora_targets": ("q", 1)}, "lora-targets.1: Input should be a valid string"),
    ({"zz": 1}, "zz: Extra inputs are not permitted"),
    ({"seq_len": "abc"}, "seq-len: 'abc' is not a valid integer"),
    ({"packing": "maybe"}, "packing: Input should be a valid boolean, unable to interpret input"),
    ({"framework": "zz"}, "framework: unknown framework 'zz' (NAME or NAME@VERSION"),
    ({"epochs": 1e308}, "epochs: 1e+308 is beyond any physical fine-tuning run"),
])
def test_errors_name_the_field(kwargs, message):
    with pytest.raises(InputError) as exc:
        make_job(**kwargs)
    assert str(exc.value).startswith(message)


def test_error_text_reads_as_pydantic():
    with pytest.raises(RecordError) as exc:
        JobSpec(micro_batch=0)
    lines = str(exc.value).splitlines()
    assert lines[:2] == ["1 validation error for JobSpec", "micro_batch"]
    assert lines[2].startswith("  Value error, must be a positive integer [type=value_error, input_value=0,")
    assert lines[-1].endswith("/v/value_error")
