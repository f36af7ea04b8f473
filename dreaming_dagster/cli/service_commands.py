"""`dreaming serve`, `mcp` and `keys`: the HTTP API, the MCP tools and the service's API keys."""

from __future__ import annotations

import click

from dreaming_dagster.cli.console import fail
from dreaming_dagster.process_defaults import default_database, default_embedder, default_settings
from dreaming_dagster.storage.records import InvalidInputError


@click.command()
@click.option("--host", default=None, help="Listen address (default: DREAMING_SERVE_HOST, 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port (default: DREAMING_SERVE_PORT, 8765; 0 picks one).")
def serve(host: str | None, port: int | None) -> None:
    """The HTTP API: save, recall, sync and stats for companion backends in any language (docs at /docs).

    Stops gracefully on SIGTERM or Ctrl-C: requests in flight finish (DREAMING_SERVE_SHUTDOWN_SECONDS),
    every save is one transaction, so nothing is left half-written."""
    from dreaming_dagster.service.server import PortInUseError
    from dreaming_dagster.service.server import serve as run_service

    try:
        run_service(default_settings(), host, port)
    except PortInUseError as exc:
        fail(str(exc))


@click.command()
@click.option("--kg-id", default="default", show_default=True, help="The tenant whose memory the tools use.")
def mcp(kg_id: str) -> None:
    """MCP tools over stdio (remember, recall) for agent frameworks: `dreaming mcp` as the server command."""
    from dreaming_dagster.service.mcp_tools import build_mcp_server, run_stdio

    try:
        server = build_mcp_server(default_settings(), kg_id)
    except InvalidInputError as exc:
        fail(str(exc))
    run_stdio(server)


@click.group()
def keys() -> None:
    """API keys of the HTTP service: each bound to one tenant (kg_id), stored hashed."""


@keys.command("create")
@click.option("--tenant", "kg_id", required=True, help="The kg_id every request with this key reads and writes.")
@click.option("--name", default="", help="What the key is for (shown by `keys list`).")
def keys_create(kg_id: str, name: str) -> None:
    """Print a new key once: store it now, it cannot be shown again."""
    from dreaming_dagster.service import api_keys

    try:
        secret, row = api_keys.create_key(default_database(), default_embedder().spec, kg_id, name)
    except (InvalidInputError, ValueError) as exc:
        fail(str(exc))
    click.echo(f"key {row['id']} for tenant {row['kg_id']} (shown once):", err=True)
    click.echo(secret)


@keys.command("list")
def keys_list() -> None:
    from dreaming_dagster.service import api_keys

    for row in api_keys.list_keys(default_database(), default_embedder().spec):
        state = f"revoked {row['revoked_at']:%Y-%m-%d %H:%M}" if row["revoked_at"] else "live"
        click.echo(f"{row['id']}  {row['prefix']}…  tenant={row['kg_id']}  {state}  {row['name']}")


@keys.command("revoke")
@click.argument("key_id")
def keys_revoke(key_id: str) -> None:
    """Revoke the key KEY_ID (from `keys list`): its next request gets 401."""
    from dreaming_dagster.service import api_keys

    row = api_keys.revoke_key(default_database(), default_embedder().spec, key_id)
    if row is None:
        fail(f"no key {key_id!r}")
    click.echo(f"revoked {row['id']} ({row['prefix']}…, tenant {row['kg_id']})")



COMMANDS = (serve, mcp, keys)
