"""Field types and validators shared by the site config's models and the job spec.

Each wraps the one rule in :mod:`hpcjobs.safetext` or :mod:`hpcjobs.contract.slurmtime`, so a
site config and a job file refuse the same text the same way. What differs between the two on
purpose stays in its own module: the job spec refuses the variable names hpcjobs manages
(``script/jobspec.py``), and a site config accepts YAML numbers for NCCL values (``models.py``).

A render loads this module; only a JSON Schema (``site schema``, ``job schema``) needs
pydantic's ``TypeAdapter``, imported where the schema is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, cast

from pydantic import AfterValidator, BeforeValidator, Field
from pydantic_core import PydanticUndefined, core_schema

from hpcjobs.contract.slurmtime import parse_slurm_time
from hpcjobs.safetext import MAX_COUNT, check_safe, check_signal_name, int_checker

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
    from pydantic.json_schema import JsonSchemaValue


def no_control(value: str) -> str:
    """Refuse control and line-separator characters (:func:`hpcjobs.safetext.check_safe`)."""
    return check_safe(value)


def slurm_time(value: str) -> str:
    """Keep ``value`` if it is Slurm time syntax (:func:`parse_slurm_time`)."""
    parse_slurm_time(value)
    return value


def signal_name(value: str) -> str:
    """Keep ``value`` if it names a signal Slurm can send."""
    return check_signal_name(value)


class LazyInputBeforeValidator(BeforeValidator):
    """A :class:`pydantic.BeforeValidator` whose ``json_schema_input_type`` costs nothing until a
    JSON schema is asked for.

    pydantic's own builds a core schema of the input type each time a model with the field is
    built, that is on each start of the CLI, though only a JSON schema (``hpcjobs site schema``,
    ``hpcjobs job schema``) reads it. This one validates the same way: ``func``, which takes the
    value only, runs before the schema of what precedes it in the ``Annotated``. Where pydantic
    puts the input type's core schema, it puts a placeholder that stands for the JSON schema of
    ``json_schema_input_type``, built only when a JSON schema is generated. As with pydantic's,
    the input type describes the field in the validation-mode JSON schema, and the field's own
    type in the serialization-mode one.
    """

    __slots__ = ()

    def __get_pydantic_core_schema__(
        self, source_type: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        if self.json_schema_input_type is PydanticUndefined:
            return super().__get_pydantic_core_schema__(source_type, handler)
        placeholder = core_schema.any_schema(
            metadata={"pydantic_js_functions": [self._input_json_schema]}
        )
        return core_schema.no_info_before_validator_function(
            cast("core_schema.NoInfoValidatorFunction", self.func),
            handler(source_type),
            json_schema_input_schema=placeholder,
        )

    def _input_json_schema(
        self, _placeholder: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """The JSON schema of the input type, in the generator that asks (refs and all)."""
        from pydantic import TypeAdapter

        return handler(TypeAdapter(self.json_schema_input_type).core_schema)


#: Text without control or line-separator characters.
SafeStr = Annotated[str, AfterValidator(no_control)]
#: The name of a signal (``USR2``, ``SIGTERM``).
SignalName = Annotated[str, AfterValidator(signal_name)]


def whole_number(
    minimum: int = 0, maximum: int = MAX_COUNT, *, text_ok: bool = False
) -> LazyInputBeforeValidator:
    """A whole number in ``minimum..maximum`` (:func:`hpcjobs.safetext.check_int`: never a bool
    or a float; ASCII digits too where ``text_ok``). The JSON schema (``hpcjobs site schema``,
    ``hpcjobs job schema``) says the same."""
    number: Any = Annotated[int, Field(ge=minimum, le=maximum)]
    given: Any = number | Annotated[str, Field(pattern=r"^[0-9]+$")] if text_ok else number
    return LazyInputBeforeValidator(
        int_checker(minimum, maximum, text_ok=text_ok), json_schema_input_type=given
    )


def text_from(convert: Any, *also: Any) -> LazyInputBeforeValidator:
    """``convert`` before a text field's own rules, for a field that also takes a value of the
    types ``also`` in a YAML file (``NCCL_IB_TIMEOUT: 22``); the JSON schema says so."""
    given: Any = str
    for kind in also:
        given = given | kind
    return LazyInputBeforeValidator(convert, json_schema_input_type=given)


#: The JSON Schema dialect of :func:`file_schema` (pydantic writes draft 2020-12).
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def file_schema(model: Any, title: str) -> dict[str, Any]:
    """The JSON Schema of a YAML file that validates into ``model`` (a pydantic model class):
    ``hpcjobs site schema`` and ``hpcjobs job schema`` print it, for editors. It says the
    fields, their types, bounds and defaults; rules that span fields stay with ``site
    validate`` and ``submit``."""
    schema: dict[str, Any] = model.model_json_schema()
    return {"$schema": SCHEMA_DIALECT, **schema, "title": title}
