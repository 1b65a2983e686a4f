"""Errors an operator can act on. Each type carries its exit code, so any command's error is one line and a
documented exit code, never a traceback (docs/jobctl.md, "Exit codes"). Dependency-free: help and completion
import it without boto3."""

from __future__ import annotations

from typing import ClassVar

# Exit codes, the same for every command.
EXIT_OK = 0
EXIT_FAILED = 1  # the command ran and found or caused a problem
EXIT_USAGE = 2  # bad usage: click's own UsageError code
EXIT_UNREACHABLE = 3  # could not check: AWS or the endpoint unreachable, not authenticated, denied, no stack


class OperatorError(Exception):
    """The command ran and found or caused a problem (a failed move, no such message)."""

    exit_code: ClassVar[int] = EXIT_FAILED


class OperatorUsageError(OperatorError):
    """Bad usage: an option, a name or a value the command can't take."""

    exit_code: ClassVar[int] = EXIT_USAGE


class OperatorUnreachableError(OperatorError):
    """The command could not check: the stack, AWS or the endpoint can't be reached or found."""

    exit_code: ClassVar[int] = EXIT_UNREACHABLE
