"""`tower new NAME`: a new project in ./NAME — one gated agent, its tools, a worker, tests.

The files are templates kept as package data (tower/cli/new_project/*.tmpl), with two
placeholders: ``{{name}}`` (the project's and its agent's name) and ``{{Name}}`` (its
classes' prefix). Nothing is overwritten: an existing non-empty folder is refused.
"""

from __future__ import annotations

import keyword
from pathlib import Path

import click

from tower.cli.errors import CliError
from tower.cli.output import json_option, print_json

TEMPLATES = Path(__file__).with_name("new_project")
# Template path -> the file it becomes; ``agent`` is the project's name.
RENAMES = {"workflows/agent.py": "workflows/{name}.py",
           "tests/test_agent.py": "tests/test_{name}.py", "gitignore": ".gitignore"}
# Names the project's own modules, or Tower itself, already use.
TAKEN = {"tower", "workflows", "activities", "worker", "tests", "payments", "temporalio"}


def check_name(name: str) -> None:
    if not name.isidentifier() or keyword.iskeyword(name):
        raise CliError(f"bad project name {name!r}: use a Python identifier "
                       "(letters, digits, underscores; not starting with a digit), e.g. payouts")
    if name in TAKEN or name.startswith("test"):
        raise CliError(f"bad project name {name!r}: it would clash with a module the project "
                       "or Tower uses; pick another, e.g. payouts")


def class_prefix(name: str) -> str:
    """payouts -> Payouts, my_shop -> MyShop."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part) or "Agent"


def render(name: str) -> dict[str, str]:
    """The new project's files: relative path -> text."""
    files = {}
    for template in sorted(TEMPLATES.rglob("*.tmpl")):
        relative = template.relative_to(TEMPLATES).as_posix().removesuffix(".tmpl")
        target = RENAMES.get(relative, relative).format(name=name)
        text = template.read_text()
        files[target] = text.replace("{{name}}", name).replace("{{Name}}", class_prefix(name))
    return files


@click.command("new", help=(
    "Create ./NAME, a Tower project: workflows/NAME.py (one agent with an approval gate), "
    "activities/payments.py (its payment tool, exactly once), worker.py, tests/ (in "
    "process, live through the worker, replay) and a pyproject.toml depending on tower. "
    "Then: cd NAME && pytest. docs/write-your-own-agent.md explains every file."))
@click.argument("name", metavar="NAME")
@json_option("the project's folder, its agent and the files written, as JSON")
def command(name: str, as_json: bool) -> int:
    check_name(name)
    folder = Path(name)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise CliError(f"{folder.resolve()} already exists and is not empty: nothing was "
                       "written (pick another NAME, or remove it)")
    files = render(name)
    try:
        for relative, text in files.items():
            path = folder / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    except OSError as exc:
        raise CliError(f"cannot write the project in {folder.resolve()}: {exc.strerror}") from None
    if as_json:
        print_json({"project": str(folder.resolve()), "agent": name, "files": list(files)})
        return 0
    print(f"created {folder.resolve()}: agent {name!r} in workflows/{name}.py")
    for relative in files:
        print(f"  {relative}")
    print(f"next: cd {name} && pytest    (then tower graph {name}; the live run: README.md)")
    return 0
