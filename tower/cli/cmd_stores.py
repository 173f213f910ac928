"""`tower stores`: where the settings every process reads (tower/activities/stores.py) put
each store, and whether each answers."""

from __future__ import annotations

import click

from tower.cli.output import json_option, print_json, table


@click.command("stores", help=(
    "Say where this process's settings put the message store, the stream store and the "
    "payload store (TOWER_STORE_URL, else TOWER_MESSAGES / TOWER_STREAMS / TOWER_PAYLOAD_DIR, "
    "else local files under .tower/), whether each answers, and warn when one is a local "
    "file but the Temporal server is shared by several hosts. Exits 1 if a store does not "
    "answer."))
@click.option("--no-server", is_flag=True,
              help="do not ask the Temporal server whether it is shared")
@json_option("print each store as JSON")
async def command(no_server: bool, as_json: bool) -> int:
    from tower.activities.stores import StoreSettings, local_warning, probe, shared_server

    settings = StoreSettings.from_env()
    specs, where = settings.specs(), settings.described()
    found = {spec: probe(spec) for spec in set(specs.values())}  # one URL: asked once
    rows = [{"store": name, "where": where[name], "serves": found[spec][0],
             "found": found[spec][1]} for name, spec in specs.items()]
    shared = None
    if not no_server:
        from tower.client import connect

        shared = await shared_server(await connect())
    local = settings.local()
    warning = local_warning(local) if shared and local else ""
    if as_json:
        print_json({"stores": rows, "shared_server": shared, "warning": warning})
    else:
        table(["store", "where", "found"], [[r["store"], r["where"], r["found"]] for r in rows])
        if warning:
            click.echo(f"warning: {warning}", err=True)
    return 0 if all(r["serves"] for r in rows) else 1
