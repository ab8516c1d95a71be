"""``hpcjobs template list|show``: which file serves each job-script template and block."""

from __future__ import annotations

from pathlib import Path

import click

from hpcjobs.config.loader import load_site
from hpcjobs.errors import TemplateError
from hpcjobs.script.templating import BLOCKS, block_file, find_template, main_templates, search_path

_DIR_OPTION = click.option(
    "--template-dir",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Extra template folder, searched first (as with submit).",
)


@click.group("template")
def template() -> None:
    """Show the job-script templates and the blocks they are built from.

    Each block can be replaced on its own: put a file of the same name under blocks/ in the
    user folder (~/.config/hpcjobs/templates) or the site's folder (<site>.templates next to
    the site config).
    """


def _site_name(ctx: click.Context) -> str | None:
    site = (ctx.find_root().obj or {}).get("site")
    if site is None:
        return None

    return load_site(site).name


@template.command("list")
@_DIR_OPTION
@click.pass_context
def list_templates(ctx: click.Context, template_dir: tuple[Path, ...]) -> None:
    """List main templates and blocks with the file that serves each one."""
    dirs = search_path(_site_name(ctx), list(template_dir))
    click.echo("Search path (first match wins):")
    for label, folder in dirs:
        click.echo(f"  {label:<22} {folder}")
    click.echo("\nMain templates:")
    for source in main_templates(dirs):
        click.echo(f"  {source.name.removesuffix('.sh.j2'):<12} {source.origin:<22} {source.path}")
    click.echo("\nBlocks:")
    for block, about in BLOCKS.items():
        found = find_template(block_file(block), dirs)
        where = f"{found.origin:<22} {found.path}" if found else "MISSING"
        click.echo(f"  {block:<12} {where}")
        click.echo(f"  {'':<12} {about}")


@template.command("show")
@click.argument("name")
@_DIR_OPTION
@click.pass_context
def show_template(ctx: click.Context, name: str, template_dir: tuple[Path, ...]) -> None:
    """Print the file that serves NAME (a block such as 'launch', or a main template)."""
    dirs = search_path(_site_name(ctx), list(template_dir))
    wanted = block_file(name) if name in BLOCKS else f"{name.removesuffix('.sh.j2')}.sh.j2"
    found = find_template(wanted, dirs)
    if found is None:
        raise TemplateError(
            f"no template or block named {name!r}",
            hint="run 'hpcjobs template list' to see the names",
        )
    click.echo(f"# {found.origin}: {found.path}", err=True)
    click.echo(found.path.read_text(encoding="utf-8"), nl=False)


__all__ = ["template"]
