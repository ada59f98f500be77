"""Error kinds the runtime tells apart.

``InputError`` is the user's to fix (exit code 2, one line). ``InfraError`` is an
endpoint or store fault after retries; ``ModelError`` is a model that answered
but not usably. Metrics never count an ``InfraError`` as a wrong answer.
"""

from __future__ import annotations


class InputError(Exception):
    """Bad configuration, dataset or argument: one clear line naming file, record and field."""

    def __init__(self, message: str, *, file: str | None = None, record: int | str | None = None,
                 field: str | None = None) -> None:
        where = ", ".join(
            part for part in (
                file and f"{file}",
                record is not None and f"record {record}",
                field and f"field {field!r}",
            ) if part
        )
        super().__init__(f"{where}: {message}" if where else message)


class InfraError(Exception):
    """An endpoint or store could not serve the request (after retries)."""


class ModelError(Exception):
    """The model answered, but its output was unusable (e.g. invalid after one repair)."""
