"""Which executor a session's units run on (``--executor``, ``--ray-address``), and the check that it can run."""

from __future__ import annotations

from dataclasses import dataclass
from importlib.util import find_spec
from typing import Literal

from dyneval.state.config import RunConfig
from dyneval.state.errors import InputError


@dataclass(frozen=True)
class ExecutorChoice:
    """Where the units of this session run (``--executor``, ``--ray-address``): a choice of the session, not a
    setting of the run, so a run started on threads may be resumed on Ray and the other way round."""

    name: Literal["threads", "ray"] = "threads"
    ray_address: str | None = None

    def check(self, config: RunConfig) -> None:
        """Refuse a choice that cannot run, before anything is created: the Ray cluster must answer within
        :data:`.ray_address.REACH_S` seconds."""
        if self.ray_address and self.name != "ray":
            raise InputError("--ray-address names the Ray cluster of --executor ray", field="--ray-address")
        if self.name != "ray":
            return
        if not config.stores.postgres_dsn:
            raise InputError(
                "--executor ray needs --postgres-dsn: any worker continues any unit from its "
                "checkpoints, and final records are claimed in the database",
                field="--executor",
            )
        if find_spec("ray") is None:
            raise InputError("--executor ray needs Ray: pip install 'dyneval[ray]'", field="--executor")
        from dyneval.runtime.executors.ray_address import effective_address, reach

        address, source = effective_address(self.ray_address)
        if address is not None:
            reach(address, source)  # a malformed address is InputError, one that does not answer InfraError
