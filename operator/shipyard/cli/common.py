"""What the cluster commands share: the namespace option, consoles, and turning every failure
into one clear line on stderr (never a traceback)."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click
from rich.console import Console

NAMESPACE_OPTION = click.option(
    "--namespace", "-n", default=None,
    help="Namespace (default: the kubeconfig context's, else default).",
)


class CLIError(click.ClickException):
    """A failure the user can act on; printed as `error: <message>`, exit status 1."""

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


def fail(message: str) -> NoReturn:
    raise CLIError(message)


# soft_wrap: a line longer than the terminal is left to the terminal, never broken by rich, so
# that a hint such as `shipyard watch NAME -n NS` can always be copied whole.
def out() -> Console:
    return Console(highlight=False, soft_wrap=True)


def err() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def namespace_or_default(namespace: str | None) -> str:
    if namespace:
        return namespace
    from shipyard.kube.trials import current_namespace

    return current_namespace()


def describe_exception(exc: BaseException) -> str | None:
    """One line for the failures that talking to a cluster brings; None for anything else."""
    from shipyard.kube.errors import describe

    return describe(exc)


class ShipyardGroup(click.Group):
    """Every subcommand's failure becomes `error: ...` on stderr with exit status 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException,
                SystemExit):
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except Exception as exc:
            described = describe_exception(exc)
            if described is None:
                described = f"unexpected failure: {type(exc).__name__}: {exc}"
            raise CLIError(described) from None
