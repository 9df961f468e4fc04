"""Every request body the service takes, written once as pydantic models.

The views validate through these (`api.validation.parse`) and the OpenAPI document is
generated from them (`api.openapi`), so the document cannot promise what the server
refuses. Limits a server sets (MAX_BATCH, this host's memory) are built into the models
of each app (`api.validation.request_models`); the sample's are in `api.sample_schemas`.

A validator here that refuses raises `field_error` (the field's path goes in front of
its text) or `body_error` (its text names the field itself, or none); `api.validation`
words pydantic's own errors in the same style.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    WithJsonSchema,
    create_model,
    model_validator,
)
from pydantic_core import PydanticCustomError

from costmodel.features import (
    ALL_FEATURES,
    KNOWN_TARGETS,
    MODEL_FEATURES,
    SCHEMA_VERSION,
    Placement,
    UnknownTargetError,
    normalize_target,
)
from costmodel.features.environment import chips

# Far above any real count (flops of the largest programs are ~1e18), low enough that the
# model's power law cannot overflow a float.
MAX_FEATURE_VALUE = 1e30
MAX_BUDGET_SECONDS = 7 * 24 * 3600.0
# the models whose missing and unknown fields are reported as features
FEATURE_VECTORS = ("FeatureVector", "SampleFeatureVector")

# What a feature vector says of the machine it came from; 0 CPUs is what text-only
# features (no machine) carry.
MAX_HOST_CPU_COUNT = 100_000
MAX_CHIPS = 1 << 20
MAX_VERSION_LENGTH = 64

# Strict: a number is a number (not "1" or true), a string a string.
CONFIG = ConfigDict(extra="forbid", strict=True, protected_namespaces=())


def field_error(message: str) -> PydanticCustomError:
    return PydanticCustomError("field_error", "{message}", {"message": message})


def body_error(message: str) -> PydanticCustomError:
    return PydanticCustomError("body_error", "{message}", {"message": message})


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


def omittable(**kwargs: Any) -> Any:
    """A field that may be left out but not sent as null: None inside, no default shown."""
    return Field(None, json_schema_extra=_no_default, **kwargs)


def number(minimum: float, maximum: float, *, exclusive: bool = False) -> Any:
    """A finite JSON number in range; in strict mode a boolean is not one."""
    low = {"gt": minimum} if exclusive else {"ge": minimum}
    return Annotated[float, Field(le=maximum, allow_inf_nan=False, **low)]


def _choice(values: list[str]) -> Any:
    # Documented by the canonical names; `normalize_target` also takes other case and cuda.
    return Annotated[str, WithJsonSchema({"type": "string", "enum": values})] | None


Backend = _choice(sorted(KNOWN_TARGETS))
# a target is a known name, or a topology of a TPU chip (`v5e:4x4`, `environment.chips`)
Target = Annotated[str, WithJsonSchema({"type": "string", "anyOf": [
    {"enum": sorted({t for ts in KNOWN_TARGETS.values() for t in ts})},
    {"pattern": "^(" + "|".join(KNOWN_TARGETS["tpu"]) + r"):[1-9][0-9]*(x[1-9][0-9]*){1,2}$"}]})
] | None


def known_targets_text() -> str:
    return ", ".join(Placement(b, t).where for b, ts in KNOWN_TARGETS.items() for t in ts)


def placement(backend: str | None, target: str | None, where: str = "") -> tuple[str, str]:
    """Normalized (backend, target); a `body_error` listing the known pairs when unknown."""
    try:
        return normalize_target(backend or "cpu", target)
    except UnknownTargetError as exc:
        raise body_error(f"{where}{exc}; known backend/target pairs: "
                         f"{known_targets_text()}") from None


def _integer(value: Any) -> Any:
    # A literal compares by equality, so 17.0 would pass for 17.
    if isinstance(value, float):
        raise field_error(f"must be an integer, got {value!r}")
    return value


SchemaVersion = Annotated[Literal[SCHEMA_VERSION], BeforeValidator(_integer)]


class _Vector(BaseModel):
    model_config = CONFIG

    def feature_values(self) -> dict[str, float]:
        """Every feature by name; an absent jaxpr feature is NaN (as in `Features`)."""
        values = self.__dict__
        return {name: float("nan") if values[name] is None else values[name]
                for name in ALL_FEATURES}


def feature_vector_model(name: str, maximum: float) -> type[_Vector]:
    """A feature vector model whose counts are at most `maximum`."""
    count = number(0.0, maximum)
    model = frozenset(MODEL_FEATURES)
    features: dict[str, Any] = {n: (count, ...) if n in model else (count | None, None)
                                for n in ALL_FEATURES}
    return create_model(
        name, __base__=_Vector,
        __doc__="What Features.to_dict() gives: its schema_version must be this server's; "
                "its backend and target, when given, the request's. Every StableHLO "
                "feature is required, jaxpr ones may be null or left out.",
        schema_version=(SchemaVersion, ...), backend=(Backend, None), target=(Target, None),
        jaxlib_version=(Annotated[str, Field(max_length=MAX_VERSION_LENGTH)] | None, None),
        host_cpu_count=(Annotated[int, Field(ge=0, le=MAX_HOST_CPU_COUNT)] | None, None),
        # the placement inputs `Features.model_inputs()` adds (a TPU topology's model reads
        # them): chips must be the target's, the sharding defaults to none
        chips=(number(1.0, MAX_CHIPS) | None, None),
        sharded_args=(count | None, None),
        sharded_input_share=(number(0.0, 1.0) | None, None),
        **features)


FeatureVector = feature_vector_model("FeatureVector", MAX_FEATURE_VALUE)

_STABLEHLO = "StableHLO module text (`jax.jit(f).lower(x).as_text()`)"
_BACKEND = "default cpu"
_TARGET = ("GPU or TPU target; default h100 for gpu, v5e for tpu, '' for cpu; a TPU "
           "topology (v5e:2x2, v5e:4x4) compiles over all its chips")


class Program(BaseModel):
    """One program: StableHLO text or a feature vector (exactly one), and where it compiles."""

    model_config = ConfigDict(**CONFIG, json_schema_extra={
        "oneOf": [{"required": ["stablehlo"]}, {"required": ["features"]}]})

    stablehlo: str = omittable(description=_STABLEHLO)
    features: FeatureVector = omittable()
    backend: Backend = Field(None, description=_BACKEND)
    target: Target = Field(None, description=_TARGET)

    @model_validator(mode="after")
    def _placed(self) -> Program:
        # A vector from Features.to_dict() says where it was extracted for; the request
        # may leave that out, and may not ask for another place.
        vector = self.features
        own = vector is not None and vector.backend is not None
        if own and self.backend is None:
            placed = placement(vector.backend, vector.target, "features.")
        else:
            placed = placement(self.backend, self.target)
            theirs = placement(vector.backend, vector.target, "features.") if own else placed
            if theirs != placed:
                raise body_error(f"features.backend: the vector was extracted for "
                                 f"{Placement(*theirs).where}, the request asks for "
                                 f"{Placement(*placed).where}")
        self.backend, self.target = placed
        if vector is not None and vector.chips is not None \
                and vector.chips != chips(self.target):
            raise body_error(f"features.chips: the vector says {vector.chips:g} chips, the "
                             f"target {self.target or Placement(*placed).where} has "
                             f"{chips(self.target)}")
        if (self.stablehlo is None) == (vector is None):
            raise body_error("give exactly one of 'stablehlo' (module text) or 'features' (an "
                             "object of feature values)" + ("" if vector is None else "; got both"))
        return self


class PredictProgram(Program):
    """A program to predict, and for a TPU chip the process state of its compile."""

    process_state: Literal["fresh", "warm"] = Field(
        "fresh", description="TPU: predict a compile early in a fresh process (fresh, as a "
        "training script's first jit) or after about a hundred others in the process (warm); "
        "other backends ignore it")


_Budget = number(0.0, MAX_BUDGET_SECONDS, exclusive=True) | None


class AdviseProgram(Program):
    """A program and the compile time it may take before splitting it pays."""

    budget_seconds: _Budget = Field(None, description="default 10")


class BlameRequest(BaseModel):
    """StableHLO text printed with locations (`as_text(debug_info=True)`) names lines."""

    model_config = CONFIG

    stablehlo: str = Field(description=_STABLEHLO)
    backend: Backend = Field(None, description=_BACKEND)
    target: Target = Field(None, description=_TARGET)

    @model_validator(mode="after")
    def _placed(self) -> BlameRequest:
        self.backend, self.target = placement(self.backend, self.target)
        return self


class RetrainRequest(BaseModel):
    """Which backend/target to retrain; none given: every one with enough rows."""

    model_config = CONFIG

    backend: Backend = None
    target: Target = None

    @model_validator(mode="after")
    def _placed(self) -> RetrainRequest:
        if self.backend is not None or self.target is not None:
            self.backend, self.target = placement(self.backend, self.target)
        return self


def one_or_batch(item: type[BaseModel], name: str, max_batch: int) -> Any:
    """`item`, or `{"instances": [item, ...]}` of at most `max_batch` (a body with
    `instances` is a batch); the tags are the models' names, as the document has them."""
    batch = create_model(name, __config__=CONFIG, instances=(
        Annotated[list[item], Field(min_length=1, max_length=max_batch)], ...))
    one = item.__name__

    def which(body: Any) -> str:
        return name if isinstance(body, dict) and "instances" in body else one

    return Annotated[Annotated[item, Tag(one)] | Annotated[batch, Tag(name)],
                     Discriminator(which)]
