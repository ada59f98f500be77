"""The Ray cluster a run connects to (``--executor ray [--ray-address ADDR]``), checked before the run starts.

``ray.init`` retries an address that does not answer for minutes (20 attempts of up to 30 s each in Ray 2.x), and
a SIGTERM meanwhile waits for its current attempt to end. So the run reaches the cluster's GCS port itself first,
within :data:`REACH_S` seconds, before its run folder is made: a malformed address is bad input (exit 2), one that
does not answer is a cluster that is down (exit 6).

Which address Ray will use is decided as ``ray.init`` decides it: ``--ray-address HOST:PORT`` as given;
``auto``, or no ``--ray-address``, the ``RAY_ADDRESS`` environment variable if set; else (``auto``) a cluster Ray
finds on this machine by its running processes, or (no address) a new one Ray starts on this machine.

A cluster on this machine stays on its loopback interface: Ray's servers (GCS, raylet, object manager, the
workers' own) listen on 127.0.0.1 only when their node's address is exactly 127.0.0.1, and Ray turns a loopback
address into the machine's network address unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` is set before it is
imported (:func:`keep_on_loopback`).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import time
from urllib.parse import urlsplit

from dyneval.state.errors import InfraError, InputError

#: Seconds within which the cluster's GCS port must accept a connection (attempts every half second).
REACH_S = 5.0
#: Ray's switch between the machine's network address and loopback for a node or driver on this machine (read
#: when ``ray`` is imported; "0" keeps 127.0.0.1, and refuses to start a worker node with ``ray start``).
LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def effective_address(flag: str | None) -> tuple[str | None, str]:
    """The address ``ray.init`` will connect to, and where it came from (a flag or variable name); ``None`` when
    Ray finds or starts the cluster itself."""
    if flag not in (None, "auto"):
        return flag, "--ray-address"
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"], "RAY_ADDRESS"
    return None, "--ray-address"


def host_port(address: str, source: str) -> tuple[str, int]:
    """``HOST:PORT`` (an IPv6 host in brackets) as its parts; anything else is bad input named after ``source``."""
    try:
        parts = urlsplit(f"//{address}")
        host, port = parts.hostname, parts.port
    except ValueError:
        host = port = None
    if not host or port is None or parts.path or parts.query or parts.fragment or parts.username:
        raise InputError(
            f"{address!r} is not HOST:PORT (the GCS address of the cluster's head, as `ray start "
            "--head` prints it) or auto",
            setting=source,
        )
    return host, port


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def reach(address: str, source: str) -> None:
    """Connect to ``address``'s port within :data:`REACH_S` seconds, or raise ``InfraError`` with the reason."""
    host, port = host_port(address, source)
    deadline = time.monotonic() + REACH_S
    while True:
        try:
            with socket.create_connection((host, port), timeout=max(0.1, min(1.0, deadline - time.monotonic()))):
                return
        except OSError as exc:
            if time.monotonic() + 0.5 >= deadline:
                raise InfraError(
                    f"the Ray cluster at {address} ({source}) does not answer: no connection within "
                    f"{REACH_S:g} s ({exc.strerror or exc})"
                ) from None
        time.sleep(0.5)


def keep_on_loopback(address: str | None) -> None:
    """Before Ray's first import: a cluster Ray starts on this machine (``address`` ``None``), or one reached at a
    loopback address, keeps 127.0.0.1 as its address (unless the variable is set already)."""
    if address is None or is_loopback(host_port(address, "--ray-address")[0]):
        os.environ.setdefault(LOOPBACK_SWITCH, "0")
