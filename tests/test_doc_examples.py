"""Every `tower` example in README.md and docs/*.md runs on a fresh setup and ends the way
its page says (exit 0, or the `error:`/`refused:` the page shows).

A fresh setup: an empty working directory and tools database, the dev server's default
namespace, a worker on the default task queue, and what `tower dev` prepares. Examples
that start servers (dev, demo, codec-server, model-server, inbox; their own tests run
them) or name a run only a previous output could have named (a generated id) are listed,
not run.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment
from test_cli import cli_env
from towercli import example_project, tower_cli

from tower.activities.model import ModelSettings
from tower.cli.devserver import prepare_dev_setup
from tower.client.connection import TASK_QUEUE
from worker import build_worker

pytestmark = pytest.mark.long

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SERVERS = {"dev", "demo", "codec-server", "model-server", "inbox"}
PLACEHOLDER = re.compile(r"\b(RUN|AGENT|NAME|THREAD|PATH|NODE|FILE|ID)\b|…|\.\.\.")
GENERATED = re.compile(r"\b[a-z]+-[0-9a-f]{6,8}\b|\b[0-9a-f]{8}-[0-9a-f]{4}-")
# Pages whose commands need more than Tower's fresh setup (a project of the reader's own;
# an eval's own server and a shell's globs and line continuations): their own test follows
# them there.
OWN_PROJECT = {"write-your-own-agent.md": "tests/test_guide.py",
               "evals.md": "tests/test_cli_eval.py"}


@dataclass
class Example:
    page: str
    line: int
    args: list[str]
    expect: int  # 0, 1 (refused) or 2 (error: ...)
    mkdir: str | None = None


def examples(page: Path) -> tuple[list[Example], list[str]]:
    """The page's `tower` commands in order, and the ones left out (with why)."""
    found: list[Example] = []
    skipped: list[str] = []
    if page.name in OWN_PROJECT:
        return [], [f"{page.name}: every example (run in its own project by "
                     f"{OWN_PROJECT[page.name]})"]
    lines = page.read_text().splitlines()
    in_fence = False
    for i, raw in enumerate(lines):
        if raw.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        if not in_fence and not raw.startswith("    "):
            continue
        text = raw.strip().removeprefix("$ ").split("  # ")[0].strip()
        mkdir = None
        if text.startswith("mkdir ") and "&& " in text:
            first, text = text.split("&& ", 1)
            mkdir = first.split()[1]
        text = text.removeprefix(".venv/bin/")
        if not text.startswith("tower ") or text.startswith("tower —"):
            continue
        where = f"{page.name}:{i + 1}"
        args = shlex.split(text)[1:]
        reason = ("starts a server" if args[0] in SERVERS and "--new-key" not in args else
                  "a placeholder" if PLACEHOLDER.search(text) else
                  "names a run from an earlier output" if GENERATED.search(text) else
                  "reads standard input" if "|" in text else None)
        if reason:
            skipped.append(f"{where} {text} ({reason})")
            continue
        shown = []
        for after in lines[i + 1:]:
            if after.strip().startswith(("$ ", "```")) or not after.strip():
                break
            shown.append(after)
        output = "\n".join(shown)
        expect = 1 if "refused:" in output else 2 if re.search(r"^error: ", output, re.M) else 0
        found.append(Example(where, i + 1, args, expect, mkdir))
    return found, skipped


def test_the_pages_have_examples_to_run() -> None:
    runs = [e for page in PAGES for e in examples(page)[0] if e.args[0] == "run"]
    agents = {e.args[1] for e in runs}
    assert {"account", "refund", "migration", "lifecycle", "order"} <= agents, agents


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
async def test_every_example_on_the_page_works_on_a_fresh_setup(
    env: WorkflowEnvironment, page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    found, _ = examples(page)
    if not found:
        pytest.skip(f"{page.name} has no runnable tower example")
    # The checkout's example project, with nothing from an earlier run: no .tower/, no databases.
    monkeypatch.chdir(example_project(tmp_path))
    # No approver keys yet, and the deployment's trust dir is the default .tower/trust.
    monkeypatch.setenv("TOWER_CONFIG_DIR", str(tmp_path / "approver-config"))
    monkeypatch.delenv("TOWER_TRUST_DIR")
    prepare_dev_setup()  # what `tower dev` does before it starts the server
    address = env.client.service_client.config.target_host
    async with build_worker(env.client, task_queue=TASK_QUEUE, db_path=tmp_path / ".tower" /
                            "tools.sqlite", models=ModelSettings()):
        for example in found:
            if example.mkdir:
                (tmp_path / example.mkdir).mkdir(exist_ok=True)
            code, out, err = await tower_cli(example.args, env=cli_env(address), cwd=tmp_path,
                                             timeout=180)
            assert code == example.expect, (example.page, example.args, out, err)
