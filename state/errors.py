"""Error kinds the runtime tells apart.

``InputError`` is the user's to fix (exit code 2, one line). ``InfraError`` is an
endpoint or store fault after retries; ``ModelError`` is a model that answered
but not usably. Metrics never count an ``InfraError`` as a wrong answer.
"""

from __future__ import annotations

from collections.abc import Mapping


class InputError(Exception):
    """Bad configuration, dataset or argument: one clear line naming its real source.

    A data problem names ``file``, ``record`` and ``field``. A setting names where
    its value came from in ``setting``: a flag (``--concurrency``), an environment
    variable (``DYNEVAL_CONCURRENCY``) or a config-file key
    (``eval.toml: [models.gpt] temperature``).
    """

    def __init__(self, message: str, *, file: str | None = None, record: int | str | None = None,
                 field: str | None = None, setting: str | None = None) -> None:
        self.message, self.file, self.record, self.field, self.setting = message, file, record, field, setting
        where = ", ".join(
            part for part in (
                file and f"{file}",
                record is not None and f"record {record}",
                field and f"field {field!r}",
            ) if part
        )
        if setting:
            where = f"{where} (from {setting})" if where else setting
        super().__init__(f"{where}: {message}" if where else message)

    def blamed(self, sources: Mapping[str, str]) -> InputError:
        """This error re-blamed on where a flag-named value really came from.

        Protocols name a bad parameter by its flag (``field="--per-task"``); when
        the value came from the config file or an environment variable,
        ``sources`` (flag -> real source) names that instead.
        """
        real = sources.get(self.field or "")
        if real is None:
            return self
        return InputError(self.message, file=self.file, record=self.record, setting=real)


class InfraError(Exception):
    """An endpoint or store could not serve the request (after retries)."""


class ModelError(Exception):
    """The model answered, but its output was unusable (e.g. invalid after one repair)."""
