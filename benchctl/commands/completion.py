"""`benchctl completion bash|zsh|fish`: print the shell completion script (click's shell completion).

The script calls benchctl back with `_BENCHCTL_COMPLETE=<shell>_complete`; click answers that before
any command runs, so completing a command name imports only the lazily loaded command modules.
"""

from __future__ import annotations

import click

COMPLETE_VAR = "_BENCHCTL_COMPLETE"
PROG = "benchctl"
INSTALL_HINTS = {
    "bash": 'eval "$(benchctl completion bash)"            # in ~/.bashrc',
    "zsh": 'eval "$(benchctl completion zsh)"             # in ~/.zshrc',
    "fish": "benchctl completion fish > ~/.config/fish/completions/benchctl.fish",
}


@click.command("completion")
@click.argument("shell", type=click.Choice(sorted(INSTALL_HINTS)))
def completion(shell: str) -> None:
    """Print the completion script for SHELL; source it from your shell's startup file.

    \b
    Examples:
      eval "$(benchctl completion bash)"            # in ~/.bashrc
      eval "$(benchctl completion zsh)"             # in ~/.zshrc
      benchctl completion fish > ~/.config/fish/completions/benchctl.fish
    """
    from click.shell_completion import get_completion_class

    from benchctl.__main__ import cli

    cls = get_completion_class(shell)
    if cls is None:  # click.Choice already refused anything else; kept for type-checkers
        raise click.BadParameter(f"unsupported shell {shell!r}")
    click.echo(cls(cli, {}, PROG, COMPLETE_VAR).source())
