"""``LazyInputBeforeValidator``: validates like pydantic's ``BeforeValidator`` and gives the same
JSON schemas, but builds the input type's schema only when a JSON schema is asked for."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

import pytest
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    ValidationError,
    create_model,
)
from pydantic_core import core_schema

from hpcjobs.config.fields import LazyInputBeforeValidator, text_from, whole_number
from hpcjobs.config.models import Price
from hpcjobs.script.jobspec import JobSpec


def _to_text(value: object) -> object:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if value is None:
        raise ValueError("must be text")
    return value


def _not_empty(value: str) -> str:
    if not value:
        raise ValueError("is empty")
    return value


def _number(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"must be a number, not {value!r}")
    return float(value)


def _split(value: object) -> object:
    return value.split() if isinstance(value, str) else value


#: (field type, converter, input type, annotations after the validator), each built both ways.
CASES: dict[str, tuple[Any, Any, Any, tuple[Any, ...]]] = {
    "text": (str, _to_text, str | int, (AfterValidator(_not_empty),)),
    "text-bounded": (str, _to_text, str | int, (Field(min_length=2, max_length=5),)),
    "bounded-input": (float, _number, Annotated[float, Field(gt=0, lt=10)], ()),
    "words": (list[str], _split, str | list[str], ()),
}


def _model(case: str, validator: type[BeforeValidator], strict: bool = False) -> type[BaseModel]:
    kind, func, given, after = CASES[case]
    field: Any = Annotated[kind, validator(func, json_schema_input_type=given)]
    for annotation in after:
        field = Annotated[field, annotation]
    return create_model(
        f"M_{validator.__name__}",
        __config__=ConfigDict(strict=strict, extra="forbid"),
        value=(field, ...),
        maybe=(field | None, None),
    )


def _outcome(model: type[BaseModel], value: object) -> object:
    try:
        return model.model_validate({"value": value, "maybe": value}).model_dump()
    except ValidationError as exc:
        return [(e["loc"], e["type"], e["msg"]) for e in exc.errors(include_url=False)]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("mode", ["validation", "serialization"])
def test_json_schema_is_pydantics(case: str, mode: Any) -> None:
    lazy = _model(case, LazyInputBeforeValidator).model_json_schema(mode=mode)
    eager = _model(case, BeforeValidator).model_json_schema(mode=mode)
    assert lazy == {**eager, "title": lazy["title"]}


def test_validation_schema_describes_the_input_type() -> None:
    props = _model("text", LazyInputBeforeValidator).model_json_schema()["properties"]
    assert props["value"]["anyOf"] == [{"type": "string"}, {"type": "integer"}]
    props = _model("text", LazyInputBeforeValidator).model_json_schema(mode="serialization")
    assert props["properties"]["value"]["type"] == "string"
    props = _model("bounded-input", LazyInputBeforeValidator).model_json_schema()["properties"]
    assert props["value"] == {
        "exclusiveMinimum": 0,
        "exclusiveMaximum": 10,
        "title": "Value",
        "type": "number",
    }


VALUES: list[object] = [0, 7, -1, 12.5, "", "x", "abcdef", " a b ", None, True, [], ["a"], {}]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("strict", [False, True])
def test_validates_and_refuses_as_pydantics(case: str, strict: bool) -> None:
    lazy = _model(case, LazyInputBeforeValidator, strict)
    eager = _model(case, BeforeValidator, strict)
    for value in VALUES:
        assert _outcome(lazy, value) == _outcome(eager, value), value


def test_runs_the_converter() -> None:
    model = _model("text", LazyInputBeforeValidator)
    assert model.model_validate({"value": 22}).model_dump() == {"value": "22", "maybe": None}
    assert _model("words", LazyInputBeforeValidator)(value="a b").value == ["a", "b"]  # type: ignore[attr-defined]


def test_a_bad_value_gives_the_converters_error() -> None:
    with pytest.raises(ValidationError) as caught:
        _model("text", LazyInputBeforeValidator).model_validate({"value": None})
    [error] = caught.value.errors(include_url=False)
    assert (error["loc"], error["type"], error["msg"]) == (
        ("value",),
        "value_error",
        "Value error, must be text",
    )


def test_shared_fields_keep_their_errors() -> None:
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate({"nodes": True, "bind": "yes", "command": {"a": 1}})
    errors = {e["loc"]: e["msg"] for e in caught.value.errors(include_url=False)}
    assert errors[("bind",)] == "Value error, must be true or false, not 'yes'"
    assert errors[("command",)].startswith("Value error, must be a list of words")
    assert ("nodes",) in errors
    with pytest.raises(ValidationError, match="must be a number"):
        Price.model_validate({"currency": "USD", "gpu_hour": "2"})
    assert JobSpec.model_validate({"nodes": "3", "command": "a 'b c'"}).command == ["a", "b c"]


class _Counted:
    """An input type that counts how often pydantic builds its core schema."""

    built: ClassVar[int] = 0

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        cls.built += 1
        return core_schema.int_schema(ge=3)


def test_the_input_schema_is_built_only_for_a_json_schema() -> None:
    _Counted.built = 0

    class Lazy(BaseModel):
        value: Annotated[int, LazyInputBeforeValidator(int, json_schema_input_type=_Counted)]

    assert _Counted.built == 0
    assert Lazy(value="4").value == 4
    assert _Counted.built == 0
    assert Lazy.model_json_schema()["properties"]["value"] == {
        "minimum": 3,
        "title": "Value",
        "type": "integer",
    }
    assert _Counted.built == 1

    class Eager(BaseModel):
        value: Annotated[int, BeforeValidator(int, json_schema_input_type=_Counted)]

    assert _Counted.built == 2


def test_the_shared_helpers_use_it() -> None:
    assert isinstance(whole_number(1), LazyInputBeforeValidator)
    assert isinstance(text_from(_to_text, int), LazyInputBeforeValidator)


def test_without_an_input_type_it_is_a_plain_before_validator() -> None:
    class Plain(BaseModel):
        value: Annotated[str, LazyInputBeforeValidator(_to_text)]

    assert Plain(value=5).value == "5"
    assert Plain.model_json_schema()["properties"]["value"] == {"title": "Value", "type": "string"}
