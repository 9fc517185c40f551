"""Errors a user can act on: one line, naming the file and the problem."""

from __future__ import annotations


class InputError(Exception):
    """A file that cannot be used as given (unreadable, binary, empty, too large, wrong format).

    ``str(error)`` is the one-line message the CLI prints: ``<path>: <problem>``.
    """

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem

    def __reduce__(self) -> tuple[type[InputError], tuple[str, str]]:
        """Pickled by its two parts (it crosses from the ingest worker process)."""
        return type(self), (self.path, self.problem)
