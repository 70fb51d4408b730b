"""``lakehouse pipelines`` and ``lakehouse pipeline new``: the declared event streams, and a first draft of a
new one's spec from sample lines."""

from pathlib import Path
from typing import Annotated

import typer

from cli import render
from cli.common import console, fails_in_one_line, print_json
from warehouse.settings import Settings

pipeline_app = typer.Typer(
    name="pipeline",
    help="Declare a new event stream: draft its spec from sample lines.",
    no_args_is_help=True,
)


@fails_in_one_line
def pipelines(
    as_json: Annotated[bool, typer.Option("--json", help="Print only a JSON array, one object per pipeline.")] = False,
    schema: Annotated[
        bool, typer.Option("--schema", help="Print the JSON Schema a spec file is checked against, and nothing else.")
    ] = False,
) -> None:
    """The declared pipelines: source, id, keys, event-time field, windows and tables of each."""
    from warehouse.pipelines import schema_text

    if schema:
        typer.echo(schema_text(), nl=False)
        return
    settings = Settings.from_env()
    views = settings.pipelines(tuple(settings.declared()))
    if as_json:
        print_json([render.pipeline_record(view) for view in views])
        return
    console.print(render.pipelines_table([render.pipeline_record(view) for view in views], settings.pipeline_names))


@pipeline_app.command("new")
@fails_in_one_line
def new(
    name: Annotated[str, typer.Argument(help="The pipeline's name (lower case, e.g. readings).")],
    sample: Annotated[Path, typer.Option("--sample", help="A JSON Lines file of sample events.")],
    out: Annotated[
        Path | None,
        typer.Option(
            help="Where to write the spec (default: LAKEHOUSE_PIPELINES_DIR/NAME.yaml, else pipelines/NAME.yaml)."
        ),
    ] = None,
    force: Annotated[bool, typer.Option(help="Overwrite an existing spec file.")] = False,
) -> None:
    """Draft a spec from sample lines: types inferred, id, event-time and key fields proposed (marked for
    review). The draft loads and runs as written."""
    from warehouse.pipelines import REPO_PIPELINES_DIR
    from warehouse.spec_draft import draft_spec

    settings = Settings.from_env()
    if name in settings.declared():
        raise ValueError(f"a pipeline named {name!r} is declared already")
    if not sample.is_file():
        raise FileNotFoundError(f"no such file: {sample}")
    target = out or (settings.pipelines_dir or REPO_PIPELINES_DIR) / f"{name}.yaml"
    if target.exists() and not force:
        raise FileExistsError(f"{target} exists; pass --force to overwrite it")
    with sample.open(encoding="utf-8", errors="replace") as lines:
        text, notes = draft_spec(name, lines, origin=str(sample))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    console.print(f"drafted {target}", highlight=False)
    for note in notes:
        console.print(f"  {note}", highlight=False)
