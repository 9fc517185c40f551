"""One exception base: every error a user can act on carries its exit code, and the CLI prints it as one line."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from extractor.cli.app import Commands
from extractor.errors import ExtractorError, InputError, StoreError, UsageError
from extractor.judge.labels import JudgeUnavailable, LabelsError
from extractor.review import ReviewError
from extractor.review.decide import Refused
from extractor.vocab import ExitCode


@pytest.mark.parametrize(("error", "code"), [
    (InputError("a.txt", "empty file"), ExitCode.USAGE),
    (StoreError("database is newer"), ExitCode.USAGE),
    (UsageError("unknown filter"), ExitCode.USAGE),
    (ReviewError("no document run matches"), ExitCode.USAGE),
    (Refused("the source changed"), ExitCode.FAILED),
    (LabelsError("labels.csv: line 3: not 0 or 1"), ExitCode.USAGE),
    (JudgeUnavailable("judge call failed"), ExitCode.USAGE),
    (ExtractorError("anything else"), ExitCode.FAILED),
    (ExtractorError("with its own code", ExitCode.NOT_EVALUABLE), ExitCode.NOT_EVALUABLE),
])
def test_every_user_facing_error_derives_from_the_base_and_carries_its_exit_code(error: ExtractorError,
                                                                                  code: ExitCode) -> None:
    assert isinstance(error, ExtractorError) and error.exit_code == code


def test_errors_keep_their_message_and_cross_processes() -> None:
    assert str(Refused("the source changed")) == "refused: the source changed"
    assert isinstance(UsageError("x"), ValueError)  # library callers that catch ValueError still do
    restored = pickle.loads(pickle.dumps(InputError("a.txt", "empty file")))
    assert (restored.path, restored.problem, str(restored)) == ("a.txt", "empty file", "a.txt: empty file")


def test_the_cli_turns_any_extractor_error_into_one_line_and_its_exit_code(tmp_path: Path) -> None:
    app = typer.Typer(cls=Commands)

    @app.command()
    def broken(code: int) -> None:
        raise ExtractorError(f"{tmp_path}: cannot use it", ExitCode(code))

    @app.command()
    def bug() -> None:
        raise RuntimeError("a bug keeps its traceback")

    for code in (ExitCode.FAILED, ExitCode.USAGE, ExitCode.NOT_EVALUABLE):
        result = CliRunner().invoke(app, ["broken", str(int(code))])
        assert result.exit_code == code
        assert result.stderr == f"error: {tmp_path}: cannot use it\n"
    crashed = CliRunner().invoke(app, ["bug"])
    assert crashed.exit_code == 1 and isinstance(crashed.exception, RuntimeError)
