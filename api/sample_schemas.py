"""The body of `POST /v1/samples` as pydantic models: a measured compile, physically
plausible (a sample goes into the next retrain)."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    WithJsonSchema,
    create_model,
    model_validator,
)

from .errors import json_type
from .schemas import CONFIG, Program, feature_vector_model, field_error, number, omittable

# Counts of real programs stay far below this (flops of the largest are ~1e18); the
# predict routes take up to 1e30 so that a prediction never overflows, samples need less.
MAX_SAMPLE_FEATURE = 1e20
# Physical ranges of a measured compile: below 0.1 ms is no XLA compile, above a day
# nobody waited for one. The reference program compiles in about 0.1 s on a laptop.
MIN_COMPILE_SECONDS, MAX_COMPILE_SECONDS = 1e-4, 1e5
MIN_REF_SECONDS, MAX_REF_SECONDS = 1e-3, 100.0
MAX_CPU_COUNT = 4096
MAX_ENVIRONMENT_KEYS = 64
MAX_KEY_LENGTH = 64
MAX_STRING_LENGTH = 1024          # XLA_FLAGS of real runs are a few hundred characters
# A sample may come from a bigger machine than this server's, but not from one with
# more than this many times its memory.
MEMORY_MARGIN = 16
# Environment fields that become dataset columns (the ones `training.machine` records);
# the rest of the object is kept in the store but never reaches a training row.
ROW_ENVIRONMENT = ("jax_version", "jaxlib_version", "python_version", "cpu_model", "cpu_count",
                   "hostname", "xla_flags", "harness_version", "ref_seconds")

SampleFeatureVector = feature_vector_model("SampleFeatureVector", MAX_SAMPLE_FEATURE)


def _scalar(value: Any) -> Any:
    if value is not None and not isinstance(value, (str, int, float, bool)):
        raise field_error(f"must be a string, number, boolean or null, not {json_type(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise field_error("must be finite")
    if isinstance(value, str) and len(value) > MAX_STRING_LENGTH:
        raise field_error(f"at most {MAX_STRING_LENGTH} characters, got {len(value)}")
    return value


_Text = Annotated[str, Field(max_length=MAX_STRING_LENGTH)]
_RefSeconds = number(MIN_REF_SECONDS, MAX_REF_SECONDS)
_Scalar = Annotated[Any, PlainValidator(_scalar), WithJsonSchema({"anyOf": [
    {"type": "string", "maxLength": MAX_STRING_LENGTH}, {"type": "number"},
    {"type": "boolean"}, {"type": "null"}]})]


class Environment(BaseModel):
    """Where it was measured: the fields below are checked, any other is a short scalar."""

    model_config = ConfigDict(**{**CONFIG, "extra": "allow"}, json_schema_extra={
        "maxProperties": MAX_ENVIRONMENT_KEYS, "propertyNames": {"maxLength": MAX_KEY_LENGTH}})
    __pydantic_extra__: dict[str, _Scalar]

    cpu_count: Annotated[int, Field(ge=1, le=MAX_CPU_COUNT)] = omittable()
    ref_seconds: _RefSeconds = omittable(
        description="seconds the reference program took to compile")
    jax_version: _Text = omittable()
    jaxlib_version: _Text = omittable()
    python_version: _Text = omittable()
    cpu_model: _Text = omittable()
    hostname: _Text = omittable()
    xla_flags: _Text = omittable()
    harness_version: _Text = omittable()

    @model_validator(mode="before")
    @classmethod
    def _size(cls, data: Any) -> Any:
        # what JSON Schema says with maxProperties and propertyNames, checked first
        if isinstance(data, dict):
            if len(data) > MAX_ENVIRONMENT_KEYS:
                raise field_error(f"at most {MAX_ENVIRONMENT_KEYS} fields")
            longest = max(map(len, data), default=0)
            if longest > MAX_KEY_LENGTH:
                raise field_error(f"field names are at most {MAX_KEY_LENGTH} characters, "
                                  f"one has {longest}")
        return data


class SampleProgram(Program):
    features: SampleFeatureVector = omittable()


def sample_request(max_bytes: float) -> type[SampleProgram]:
    """The sample body of a server whose memory labels are at most `max_bytes`."""
    memory = number(0.0, max_bytes) | None
    return create_model(
        "SampleRequest", __base__=SampleProgram,
        __doc__=f"A measured compile; bytes at most this host's memory times {MEMORY_MARGIN}.",
        compile_seconds=(number(MIN_COMPILE_SECONDS, MAX_COMPILE_SECONDS), ...),
        peak_memory_bytes=(memory, Field(None, description=(
            "peak host-RSS growth while compiling (what predictions call "
            "peak_memory_bytes)"))),
        executable_memory_bytes=(memory, None),
        environment=(Environment | None, None))
