"""Clients that send a request's body a byte at a time, every ``every_s`` seconds, for as long as the server keeps
their connection: what a slow or hostile client does to hold a server's connections (and its stop) open."""

from __future__ import annotations

import socket
import threading


class SlowBodies:
    """``count`` connections to 127.0.0.1:``port``, each sending ``POST path`` with its headers whole and a
    ``Content-Length`` far beyond the byte it sends every ``every_s`` seconds; :meth:`close` ends them."""

    def __init__(self, port: int, count: int, path: str = "/admin/sessions", every_s: float = 2.0) -> None:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Content-Length: 100000\r\n\r\n"
        ).encode()
        self.connections = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(count)]
        for conn in self.connections:
            conn.sendall(head + b"{")
        self.closed = {id(c): False for c in self.connections}
        self.replies = {id(c): b"" for c in self.connections}
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._read, args=(c,), daemon=True) for c in self.connections]
        self._threads.append(threading.Thread(target=self._drip, args=(every_s,), daemon=True))
        for thread in self._threads:
            thread.start()

    def _drip(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            for conn in self.connections:
                if not self.closed[id(conn)]:
                    try:
                        conn.sendall(b" ")
                    except OSError:
                        self.closed[id(conn)] = True

    def _read(self, conn: socket.socket) -> None:
        """What the server answers, until it closes the connection (EOF or reset)."""
        conn.settimeout(None)
        try:
            while chunk := conn.recv(65536):
                self.replies[id(conn)] += chunk
        except OSError:
            pass
        self.closed[id(conn)] = True

    def open_count(self) -> int:
        return sum(not closed for closed in self.closed.values())

    def statuses(self) -> list[str]:
        """Each connection's reply status line (``""`` when it was closed without one)."""
        return [self.replies[id(c)].split(b"\r\n", 1)[0].decode(errors="replace") for c in self.connections]

    def close(self) -> None:
        self._stop.set()
        for conn in self.connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
