"""Waiting for a server's listening socket to close (a server told to stop refuses new connections first)."""

from __future__ import annotations

import socket
import time


def listener_closed(port: int, within_s: float) -> bool:
    """True as soon as a connection to 127.0.0.1:``port`` is refused, False if it is still accepted after
    ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return True
        time.sleep(0.1)
    return False
