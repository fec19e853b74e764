"""Bad input is one line on stderr, never a traceback: the root group turns usage errors
into one line (exit 2) and an OSError that escapes a command into one line (exit 1), and
the path checks here refuse a bad path before anything starts (exit 2)."""

from __future__ import annotations

import errno
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from typer.core import TyperGroup

from herdbook.cli import client

log = logging.getLogger("herdbook.cli")


def _say(message: str) -> None:
    """``client.fail``'s line, with click's wrapped text joined back into one."""
    client.fail(" ".join(message.split()), 0)


def _flags_without_type() -> None:
    """typer shows ``<bool>`` as the "type" of every flag (``--follow``, ``-h``): a flag
    takes no value, so it shows none."""
    from typer.core import TyperOption
    shown = TyperOption.display_type_rich
    if getattr(shown, "herd", False):
        return

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag else shown(self, ctx)

    display_type_rich.herd = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


PANELS = ("Start here", "Nodes and the fleet", "Jobs", "Events, audit and history",
          "Operating herdbook")
"""The panels of `herd --help`, in this order (a command's ``rich_help_panel``)."""


def _paragraphs(text: str) -> str:
    """A docstring's paragraphs, each on one line: the terminal wraps them, not the
    source's line breaks."""
    import inspect
    return "\n\n".join(" ".join(part.split())
                       for part in inspect.cleandoc(text).split("\n\n"))


def _short(text: str) -> str:
    """The line in a command list: the first sentence, or what comes before its colon
    when that sentence runs long."""
    first = text.split("\n\n", 1)[0]
    sentence = first.split(". ", 1)[0].rstrip(".")
    if len(sentence) > 90 and ": " in sentence:
        sentence = sentence.split(": ", 1)[0]
    return sentence + "."


def finish_help(command: Any, path: str = "") -> None:
    """Every command's help as written: its text, its options' and its epilog read as
    plain text (``[default: ./.herd]`` is no rich markup tag to swallow), paragraphs
    unwrapped, a one-sentence line in its group's list, and the examples of
    ``examples.py`` as the epilog of a command that has none."""
    from rich.markup import escape

    from herdbook.cli.examples import epilog
    _flags_without_type()
    subcommands = getattr(command, "commands", None)
    runs = subcommands is None or getattr(command, "invoke_without_command", False)
    if path and runs and command.epilog is None:
        command.epilog = epilog(path)
    if command.help and not command.short_help:
        command.short_help = escape(_short(_paragraphs(command.help)))
    for holder in (command, *command.params):
        for attribute in ("help", "epilog"):
            text = getattr(holder, attribute, None)
            if text:
                paragraphs = text if attribute == "epilog" else _paragraphs(text)
                setattr(holder, attribute, escape(paragraphs))
    for name, sub in (subcommands or {}).items():
        finish_help(sub, f"{path} {name}".strip())


class OneLineErrors(TyperGroup):
    """The root `herd` group: click's usage box (usage, hint, a framed error) becomes one
    line naming the command's help; an OSError nobody caught (a path the operator gave,
    the machine's limits) becomes one line with its reason and file, exit 1. The
    traceback of the latter is logged at debug level."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             windows_expand_args: bool = True, **extra: Any) -> Any:
        if not getattr(self, "_help_finished", False):
            self._help_finished = True
            finish_help(self)
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode,
                                windows_expand_args, **extra)
        # typer vendors click: its exceptions live in typer._click, not in ``click``.
        from typer import Abort
        from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
        code: Any = 0
        try:
            code = super().main(args, prog_name, complete_var, False, windows_expand_args,
                                **extra)
        except NoArgsIsHelpError as err:     # `herd node`: the help, as typer shows it
            from typer import rich_utils
            rich_utils.rich_format_error(err)
            code = err.exit_code
        except UsageError as err:
            hint = f" (see '{err.ctx.command_path} -h')" if err.ctx is not None else ""
            _say(err.format_message() + hint)
            code = err.exit_code
        except ClickException as err:
            _say(err.format_message())
            code = err.exit_code
        except Abort:
            _say("aborted")
            code = client.EXIT_REFUSED
        except OSError as err:
            if err.errno == errno.EPIPE:    # `herd ... | head`: the reader left
                sys.stderr.close()
                os._exit(1)
            log.debug("uncaught OSError", exc_info=True)
            where = f": {err.filename}" if err.filename is not None else ""
            _say(f"{err.strerror or err}{where}")
            code = client.EXIT_REFUSED
        sys.exit(code if isinstance(code, int) else 0)

    def list_commands(self, ctx: Any) -> list[str]:
        """By panel (``PANELS``), then in the order they were added."""
        def panel(name: str) -> int:
            where = getattr(self.commands[name], "rich_help_panel", None)
            return PANELS.index(where) if where in PANELS else len(PANELS)
        return sorted(super().list_commands(ctx), key=panel)


def _exists(path: Path) -> bool:
    try:
        path.stat()
    except FileNotFoundError:
        return False
    except OSError as err:
        if err.errno in (errno.ENOTDIR, errno.ELOOP):
            return False
        raise client.fail(f"{path}: {err.strerror}", client.EXIT_USAGE) from None
    return True


def usable_dir(path: str | Path, option: str) -> Path:
    """A directory the command may use, or create with its missing parents, as `mkdir -p`
    would. Refused (exit 2) when it is a file, lies under a file, or its nearest existing
    ancestor is not writable. Creates nothing."""
    target = Path(path)
    if _exists(target):
        if not target.is_dir():
            raise client.fail(f"{option} {target} is not a directory", client.EXIT_USAGE)
        if not os.access(target, os.W_OK | os.X_OK):
            raise client.fail(f"{option} {target} is not writable", client.EXIT_USAGE)
        return target
    ancestor = target.parent
    while not _exists(ancestor) and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise client.fail(f"cannot create {option} {target}: {ancestor} is not a directory",
                          client.EXIT_USAGE)
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise client.fail(f"cannot create {option} {target}: {ancestor} is not writable",
                          client.EXIT_USAGE)
    return target


def readable_file(path: str | Path, option: str) -> Path:
    """A file the command reads: it exists, is not a directory, and opens."""
    target = Path(path)
    if not _exists(target):
        raise client.fail(f"{option} {target}: no such file", client.EXIT_USAGE)
    if target.is_dir():
        raise client.fail(f"{option} {target} is a directory, not a file", client.EXIT_USAGE)
    try:
        with open(target, "rb"):
            pass
    except OSError as err:
        raise client.fail(f"{option} {target}: {err.strerror}", client.EXIT_USAGE) from None
    return target


def writable_file(path: str | Path, option: str) -> Path:
    """A file the command writes: not a directory, in a directory that exists."""
    target = Path(path)
    if _exists(target) and target.is_dir():
        raise client.fail(f"{option} {target} is a directory, not a file", client.EXIT_USAGE)
    parent = target.parent
    if not _exists(parent) or not parent.is_dir():
        raise client.fail(f"{option} {target}: no such directory {parent}", client.EXIT_USAGE)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise client.fail(f"{option} {target}: {parent} is not writable", client.EXIT_USAGE)
    return target


def plain_files(directory: str | Path, names: tuple[str, ...], option: str) -> None:
    """The files a command keeps in ``directory``: refused (exit 2) when one of them is a
    directory or anything else that is not a regular file."""
    for name in names:
        path = Path(directory) / name
        if _exists(path) and not path.is_file():
            kind = "a directory" if path.is_dir() else "not a regular file"
            raise client.fail(f"{option} {directory}: {name} is {kind}; herd keeps a file "
                              "there", client.EXIT_USAGE)


LOG_LEVELS = ("debug", "info", "warning", "error")


def _log_level(value: str) -> str:
    import typer
    if value.lower() not in LOG_LEVELS:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(LOG_LEVELS)}")
    return value


def log_level_option(help: str = "debug, info, warning or error.") -> Any:
    """``--log-level``, refused (exit 2) unless ``logging`` knows the level."""
    import typer
    return typer.Option("--log-level", help=help, callback=_log_level)


def setup_logging(level: str) -> None:
    """The log of a long-running command (`herd up`, `herd agent`): one line per record,
    its text escaped (``herdbook.logs``)."""
    from herdbook.logs import setup_logging as setup
    setup(level)


def port(value: int, option: str) -> int:
    if not 1 <= value <= 65535:
        raise client.fail(f"{option} {value} is not a port (1-65535)", client.EXIT_USAGE)
    return value
