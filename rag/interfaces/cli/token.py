"""`rag token add|list|remove`: API tokens for `rag serve`."""

from __future__ import annotations

from typing import Annotated

import typer

from rag.core.terminal import json_line, one_line
from rag.interfaces.cli.common import ConfigOpt, GroupsOpt, JsonOpt, clean_errors, cli_settings

token_app = typer.Typer(no_args_is_help=True,
                        help="API tokens for `rag serve` (stored hashed in [server] tokens_file).")


@token_app.command("add")
@clean_errors
def token_add(
    name: Annotated[str, typer.Argument(help="User name the token stands for.")],
    groups: GroupsOpt = "",
    config: ConfigOpt = None,
) -> None:
    """Create a token for NAME and print it once; only its hash is kept."""
    from rag.interfaces.http.auth import add_token, parse_groups, tokens_path

    path = tokens_path(cli_settings(config).server)
    token = add_token(path, name, parse_groups(groups))
    typer.echo(f"token for {name} (shown once; store it now):", err=True)
    typer.echo(token)


@token_app.command("list")
@clean_errors
def token_list(config: ConfigOpt = None, json_out: JsonOpt = False) -> None:
    """Users with a token and their groups (tokens themselves are never stored)."""
    from rag.interfaces.http.auth import read_tokens, tokens_path

    entries = read_tokens(tokens_path(cli_settings(config).server))
    for e in entries:
        if json_out:
            typer.echo(json_line({"name": e.name, "groups": list(e.groups),
                                   "created": e.created}))
        else:
            typer.echo(one_line(f"{e.name}  groups: {','.join(e.groups) or '-'}  created {e.created}"))
    if not entries and not json_out:
        typer.echo("no tokens", err=True)


@token_app.command("remove")
@clean_errors
def token_remove(
    name: Annotated[str, typer.Argument(help="User whose token stops working.")],
    config: ConfigOpt = None,
) -> None:
    """Revoke NAME's token; a running server refuses it from the next request."""
    from rag.interfaces.http.auth import remove_token, tokens_path

    remove_token(tokens_path(cli_settings(config).server), name)
    typer.echo(f"removed the token of {name}", err=True)
