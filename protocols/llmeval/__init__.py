"""LLMEval-3 (seed 002): question bank, sampled exam sessions, LLM judge, relative ranking, exam server.

Modules: ``protocol`` (the batch protocol and CLI modes), ``bankio`` (import/export, validation,
near-duplicates), ``augment`` (appendix A.2), ``metrics`` (pure formulas), ``analyses``
(leaderboard, stability, kappa, contamination), ``server`` (the FastAPI exam server).
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    # Lazy, so that nodes can import protocols.llmeval.metrics without importing the graph.
    if name == "LLMEvalProtocol":
        from protocols.llmeval.protocol import LLMEvalProtocol

        return LLMEvalProtocol
    raise AttributeError(name)
