"""Field types and validators shared by the site config's models and the job spec.

Each wraps the one rule in :mod:`hpcjobs.safetext` or :mod:`hpcjobs.slurm.slurmtime`, so a
site config and a job file refuse the same text the same way. What differs between the two on
purpose stays in its own module: the job spec refuses the variable names hpcjobs manages
(``script/jobspec.py``), and a site config accepts YAML numbers for NCCL values (``models.py``).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field

from hpcjobs.safetext import MAX_COUNT, check_safe, check_signal_name, int_checker
from hpcjobs.slurm.slurmtime import parse_slurm_time


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


#: Text without control or line-separator characters.
SafeStr = Annotated[str, AfterValidator(no_control)]
#: The name of a signal (``USR2``, ``SIGTERM``).
SignalName = Annotated[str, AfterValidator(signal_name)]


def whole_number(
    minimum: int = 0, maximum: int = MAX_COUNT, *, text_ok: bool = False
) -> BeforeValidator:
    """A whole number in ``minimum..maximum`` (:func:`hpcjobs.safetext.check_int`: never a bool
    or a float; ASCII digits too where ``text_ok``). The JSON schema (``hpcjobs site schema``,
    ``hpcjobs job schema``) says the same."""
    number: Any = Annotated[int, Field(ge=minimum, le=maximum)]
    given: Any = number | Annotated[str, Field(pattern=r"^[0-9]+$")] if text_ok else number
    return BeforeValidator(
        int_checker(minimum, maximum, text_ok=text_ok), json_schema_input_type=given
    )


def text_from(convert: Any, *also: Any) -> BeforeValidator:
    """``convert`` before a text field's own rules, for a field that also takes a value of the
    types ``also`` in a YAML file (``NCCL_IB_TIMEOUT: 22``); the JSON schema says so."""
    given: Any = str
    for kind in also:
        given = given | kind
    return BeforeValidator(convert, json_schema_input_type=given)


#: The JSON Schema dialect of :func:`file_schema` (pydantic writes draft 2020-12).
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def file_schema(model: Any, title: str) -> dict[str, Any]:
    """The JSON Schema of a YAML file that validates into ``model`` (a pydantic model class):
    ``hpcjobs site schema`` and ``hpcjobs job schema`` print it, for editors. It says the
    fields, their types, bounds and defaults; rules that span fields stay with ``site
    validate`` and ``submit``."""
    schema: dict[str, Any] = model.model_json_schema()
    return {"$schema": SCHEMA_DIALECT, **schema, "title": title}
