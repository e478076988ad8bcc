"""A hand-written fake Device for unit tests: scripted answers, loud failure on anything else."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness.device.base import DeviceFacts, Progress, ShellResult, shell_command


class UnexpectedCall(AssertionError):
    pass


class FakeDevice:
    """Answers exactly the shell commands it was given; records every command it ran."""

    def __init__(self, serial: str, answers: dict[str, ShellResult]) -> None:
        self._serial = serial
        self.answers = answers
        self.commands: list[str] = []

    @property
    def serial(self) -> str:
        return self._serial

    def shell(self, cmd: str | Sequence[str], timeout: float | None = None) -> ShellResult:
        command = shell_command(cmd)
        self.commands.append(command)
        if command not in self.answers:
            raise UnexpectedCall(f"unexpected shell command: {command!r}")
        return self.answers[command]

    def push(self, local: str | Path, remote: str, progress: Progress | None = None) -> None:
        raise UnexpectedCall(f"unexpected push {local} -> {remote}")

    def facts(self) -> DeviceFacts:
        raise UnexpectedCall("unexpected facts()")
