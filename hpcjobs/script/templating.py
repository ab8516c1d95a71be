"""Job-script templates: where they are found, and a Jinja2 environment that quotes for bash.

A job script is one main template (``job.sh.j2``) built from blocks (``blocks/<name>.sh.j2``).
Each file is looked up in a list of folders, first match wins, so an admin or a user can
replace one block without copying the rest:

1. folders passed explicitly (``template_dirs``),
2. ``$HPCJOBS_TEMPLATE_PATH`` (folders separated by ``:``),
3. the user folder ``~/.config/hpcjobs/templates``,
4. the site's folder ``<name>.templates`` next to its config file, in each site search folder,
5. the built-in ``templates/``.

Every ``{{ value }}`` is shell-quoted (``shlex.quote``) and must not hold control characters;
``{{ value | raw }}`` opts out, for admin-written shell fragments only. ``{{ list | shjoin }}``
quotes each item of a list and joins them with spaces.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jinja2

from hpcjobs.atomicfile import PRIVATE_DIR
from hpcjobs.config.locate import search_dirs, user_config_dir
from hpcjobs.errors import TemplateError
from hpcjobs.resources import templates_dir
from hpcjobs.safetext import is_safe

#: The blocks of a job script, in script order, with what each one holds.
BLOCKS: dict[str, str] = {
    "resources": "header: the scheduler options, as a comment and as safe #SBATCH lines",
    "environment": "shell setup: modules, site lines, job and hpcjobs variables",
    "nccl": "NCCL/UCX/Gloo tuning variables, each with its origin",
    "binding": "per-rank CPU/GPU/NIC/NUMA placement and rank variables",
    "launch": "rendezvous address; the supervisor, started with the srun/torchrun/plain command",
}

SUFFIX = ".sh.j2"
BLOCK_DIR = "blocks"

#: What admin-written raw shell may hold beyond safe text: tabs and line breaks.
_RAW_ALLOWED = "\t\n"


_FIX_TEMPLATE = (
    "fix the template; 'hpcjobs template list' shows which file serves each template and block"
)
_NO_CONTROL = (
    "remove the newline, tab or escape character from that value (in the job spec, flags or "
    "site config); values must be single lines"
)


class Raw(str):
    """Text that goes into the script unquoted (admin-written shell)."""

    __slots__ = ()


class TemplateSource(NamedTuple):
    """The file that serves one template name, and which search folder it came from."""

    name: str
    path: Path
    origin: str


def search_path(
    site_name: str | None = None, template_dirs: Sequence[Path] | None = None
) -> list[tuple[str, Path]]:
    """The template folders in lookup order, each with a label, existing folders only."""
    dirs: list[tuple[str, Path]] = [("explicit", Path(d)) for d in template_dirs or ()]
    for entry in os.environ.get("HPCJOBS_TEMPLATE_PATH", "").split(os.pathsep):
        if entry.strip():
            dirs.append(("HPCJOBS_TEMPLATE_PATH", Path(entry).expanduser()))

    dirs.append(("user", user_config_dir() / "templates"))
    if site_name:
        for label, folder in search_dirs():
            dirs.append((f"site ({label})", folder / f"{site_name}.templates"))
    dirs.append(("built-in", templates_dir()))
    seen: set[Path] = set()
    result = []
    for label, folder in dirs:
        if folder.is_dir() and folder not in seen:
            seen.add(folder)
            result.append((label, folder))
    return result


def find_template(name: str, dirs: Sequence[tuple[str, Path]]) -> TemplateSource | None:
    """The file serving template ``name`` (a path relative to the template folders)."""
    for label, folder in dirs:
        candidate = folder / name
        if candidate.is_file():
            return TemplateSource(name, candidate, label)
    return None


def block_file(block: str) -> str:
    """The template name of a block, such as ``blocks/launch.sh.j2``."""
    return f"{BLOCK_DIR}/{block}{SUFFIX}"


def main_templates(dirs: Sequence[tuple[str, Path]]) -> list[TemplateSource]:
    """Every main template (``*.sh.j2`` at the top of a folder), first match per name."""
    found: dict[str, TemplateSource] = {}
    for label, folder in dirs:
        for path in sorted(folder.glob(f"*{SUFFIX}")):
            found.setdefault(path.name, TemplateSource(path.name, path, label))
    return [found[name] for name in sorted(found)]


def quote(value: Any) -> str:
    """Shell-quote one value for a bash script, refusing control characters."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, bool):
        raise TemplateError(
            f"a template printed the boolean {value!r}; use it in an {{% if %}} instead",
            hint=_FIX_TEMPLATE,
        )
    text = str(value)
    if not is_safe(text):
        raise TemplateError(
            f"refusing to put a value with control characters in a script: {text!r}",
            hint=_NO_CONTROL,
        )
    quoted = shlex.quote(text)
    if quoted.startswith("="):  # bash takes NAME==x fine, but readers and linters stumble
        return f"'{text}'"
    return quoted


def _raw(value: Any) -> Raw:
    text = str(value)
    if not is_safe(text, allow=_RAW_ALLOWED):
        raise TemplateError(
            f"refusing raw text with control characters: {text!r}", hint=_NO_CONTROL
        )
    return Raw(text)


def _shjoin(values: Iterable[Any]) -> Raw:
    return Raw(" ".join(quote(v) for v in values))


def _comment(value: Any) -> Raw:
    """Text for a ``#`` comment: one line, nothing to quote."""
    text = str(value)
    if not is_safe(text):
        raise TemplateError(
            f"refusing a comment with control characters: {text!r}", hint=_NO_CONTROL
        )
    return Raw(text)


def bytecode_cache() -> jinja2.BytecodeCache | None:
    """A private cache of compiled templates (``$XDG_CACHE_HOME/hpcjobs/templates``).

    Compiling the templates is most of a render's time; the cache is keyed by each template's
    source, so an edited template is recompiled. It is used only when the folder belongs to
    this user and nobody else can write to it (cached code is loaded and run).
    """
    if os.environ.get("HPCJOBS_NO_TEMPLATE_CACHE"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    folder = Path(base) / "hpcjobs" / "templates"
    try:
        folder.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        info = folder.stat()
    except OSError:
        return None
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        return None
    return jinja2.FileSystemBytecodeCache(str(folder))


def make_environment(dirs: Sequence[tuple[str, Path]]) -> jinja2.Environment:
    """A Jinja2 environment over ``dirs`` that shell-quotes every printed value."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(folder) for _, folder in dirs]),
        bytecode_cache=bytecode_cache(),
        undefined=jinja2.StrictUndefined,
        finalize=quote,
        autoescape=False,  # HTML escaping means nothing in bash; quote() does the escaping.
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["raw"] = _raw
    env.filters["shjoin"] = _shjoin
    env.filters["comment"] = _comment
    return env


def render_template(env: jinja2.Environment, name: str, context: dict[str, Any]) -> str:
    """Render template ``name`` with ``context``.

    Raises:
        TemplateError: The template is missing, malformed, or uses an undefined value.
    """
    try:
        return env.get_template(name).render(context)
    except jinja2.TemplateNotFound as exc:
        raise TemplateError(
            f"template {exc.name!r} was not found",
            hint="run 'hpcjobs template list' to see the templates and where they come from; "
            "--template NAME (or 'template:' in a job file) takes a main template's name",
        ) from None
    except jinja2.TemplateSyntaxError as exc:
        where = f"{exc.filename or exc.name}:{exc.lineno}"
        raise TemplateError(
            f"template syntax error at {where}: {exc.message}",
            hint=f"fix that line, or remove {exc.filename or 'the file'} to fall back to the "
            "next one in the search path ('hpcjobs template list' shows which file serves "
            "each template)",
        ) from None
    except jinja2.UndefinedError as exc:
        raise TemplateError(
            f"template {name!r} uses an undefined value: {exc.message}{_template_line(exc)}",
            hint="use only the names in the template context (docs/templates.md, 'Writing "
            "templates'); 'hpcjobs template show NAME' prints a built-in template to compare",
        ) from None


def _template_line(exc: BaseException) -> str:
    tb = exc.__traceback__
    where = ""
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.endswith(SUFFIX):
            where = f" (at {filename}:{tb.tb_lineno})"
        tb = tb.tb_next
    return where


__all__ = [
    "BLOCKS",
    "Raw",
    "TemplateSource",
    "block_file",
    "find_template",
    "main_templates",
    "make_environment",
    "quote",
    "render_template",
    "search_path",
]
