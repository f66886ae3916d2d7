"""The package's command-line plumbing, torch-free so that every `--help` and usage error is quick: the argument
parser with a two-line usage error (`ArgumentParser`), its integer type (`positive_int`) and `without_option`."""

from __future__ import annotations

import argparse
from typing import Sequence


class ArgumentParser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` whose usage error is two lines: a one-line usage (the arguments that must
    be given) and the error, not the full usage of every option (`--help` lists those)."""

    def error(self, message):
        self.exit(2, f"{self.short_usage()}\n{self.prog}: error: {message}\n")

    def short_usage(self) -> str:
        groups = [group for group in self._mutually_exclusive_groups if group.required]
        grouped = {action for group in groups for action in group._group_actions}
        needed = [action for action in self._actions
                  if action.required or not action.option_strings or action in grouped]
        formatter = argparse.HelpFormatter(self.prog, width=1_000_000)  # one line
        formatter.add_usage(None, needed, groups, prefix="usage: ")
        return formatter.format_help().strip() + " [options] (--help lists them)"


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1, or a usage error naming the value."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return int(text)


def without_option(argv: Sequence[str], option: str) -> list[str]:
    """`argv` without `option` and its value (`--option VALUE` or `--option=VALUE`)."""
    kept, skip_value = [], False
    for arg in argv:
        if skip_value:
            skip_value = False
        elif arg == option:
            skip_value = True
        elif not arg.startswith(option + "="):
            kept.append(arg)
    return kept


__all__ = ["ArgumentParser", "positive_int", "without_option"]
