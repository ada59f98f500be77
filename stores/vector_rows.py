"""Append-only float32 matrices of the context graph's vectors: row ``i`` = entity (or chunk) id ``i`` of the
incidence store (:mod:`stores.incidence`), for one embedding model.

On disk a matrix is a raw file ``<kind>-d<dims>.f32`` read through a memory map, so opening a graph reads no
vector and a hop touches only the rows it ranks (Algorithm 4, lines 13 and 15). Rows are appended a batch at a
time; a row a kill cut short is dropped when the file is opened again, and the build embeds from there on.
Without a folder the rows live in memory (a graph built for a test or a notebook).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np


class VectorRows:
    def __init__(self, folder: Path | None, kind: str) -> None:
        self.folder, self.kind = folder, kind
        self._lock = threading.Lock()
        self._memory: list[np.ndarray] = []
        self._matrix: np.ndarray | None = None
        self._norms: np.ndarray | None = None
        self.path: Path | None = None
        self.dims = 0
        if folder is not None:
            found = sorted(folder.glob(f"{kind}-d*.f32"))
            if found:
                self.path = found[0]
                self.dims = int(self.path.stem.rsplit("-d", 1)[1])
                whole = self.path.stat().st_size // (4 * self.dims) * 4 * self.dims
                if whole != self.path.stat().st_size:
                    os.truncate(self.path, whole)  # a row a kill cut short

    @property
    def count(self) -> int:
        if self.path is not None:
            return self.path.stat().st_size // (4 * self.dims)
        return sum(len(m) for m in self._memory)

    def append(self, vectors: Sequence[np.ndarray]) -> None:
        rows = np.asarray(np.stack(vectors), dtype=np.float32)
        with self._lock:
            self._matrix = self._norms = None
            if self.folder is None:
                self._memory.append(rows)
                return
            if self.path is None:
                self.folder.mkdir(parents=True, exist_ok=True)
                self.dims = rows.shape[1]
                self.path = self.folder / f"{self.kind}-d{self.dims}.f32"
            if rows.shape[1] != self.dims:
                raise ValueError(f"{self.path}: vectors of {rows.shape[1]} dimensions, the file holds {self.dims}")
            with self.path.open("ab") as fh:
                fh.write(rows.tobytes())
                fh.flush()
                os.fsync(fh.fileno())

    def matrix(self) -> np.ndarray:
        """All rows (memory-mapped from the file), mapped once until the next append."""
        with self._lock:
            if self._matrix is None:
                if self.path is not None and self.count:
                    self._matrix = np.memmap(self.path, dtype=np.float32, mode="r", shape=(self.count, self.dims))
                elif self._memory:
                    self._matrix = np.concatenate(self._memory)
                    self._memory = [self._matrix]
                else:
                    self._matrix = np.zeros((0, self.dims), dtype=np.float32)
            return self._matrix

    def norms(self, rows: np.ndarray) -> np.ndarray:
        """The Euclidean norms of ``rows``, each computed once (on first use, so opening a graph reads no vector;
        a row's norm is the same computed alone or with others: NumPy reduces each row on its own)."""
        matrix = self.matrix()
        with self._lock:
            if self._norms is None or len(self._norms) != len(matrix):
                self._norms = np.full(len(matrix), np.nan, dtype=np.float32)
            norms = self._norms
            todo = rows[np.isnan(norms[rows])]
            if todo.size:
                norms[todo] = np.linalg.norm(np.asarray(matrix[todo]), axis=1)
            return norms[rows]
