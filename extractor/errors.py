"""Errors a user can act on: one line naming the file or the problem, and the exit code it ends the command with.

Every such error derives from ``ExtractorError``; the CLI turns any of them into ``error: <message>`` on
stderr and its ``exit_code`` (``extractor.vocab.ExitCode``), so commands carry no try/except ladders.
Anything else escaping a command is a bug and keeps its traceback. Only the standard library and the
vocabulary are imported: the CLI imports this module for ``--help``.
"""

from __future__ import annotations

from extractor.vocab import ExitCode


class ExtractorError(Exception):
    """An error the user can act on; ``str(error)`` is the one line the CLI prints."""

    exit_code: ExitCode = ExitCode.FAILED

    def __init__(self, message: str, exit_code: ExitCode | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(ExtractorError, ValueError):
    """Options or arguments that make no sense together (also a ``ValueError`` for library callers)."""

    exit_code = ExitCode.USAGE


class InputError(ExtractorError):
    """A file that cannot be used as given (unreadable, binary, empty, too large, wrong format).

    ``str(error)`` is ``<path>: <problem>``.
    """

    exit_code = ExitCode.USAGE

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem

    def __reduce__(self) -> tuple[type[InputError], tuple[str, str]]:
        """Pickled by its two parts (it crosses from the ingest worker process)."""
        return type(self), (self.path, self.problem)


class ContractError(ExtractorError):
    """A contract that cannot be used: one line per problem, each naming the file, refused before any model call.

    ``str(error)`` puts each problem on its own line (the CLI's ``error: `` prefix repeated on each).
    """

    exit_code = ExitCode.USAGE

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\nerror: ".join(problems))
        self.problems = problems

    def __reduce__(self) -> tuple[type[ContractError], tuple[list[str]]]:
        return type(self), (self.problems,)


class StoreError(ExtractorError):
    """The database cannot be used as it is (unreachable, newer than this extractor, damaged)."""

    exit_code = ExitCode.USAGE
