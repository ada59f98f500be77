"""ATAD nodes (seed 003), by role: teacher (generate), orchestrator (validate, escalate), student (solve),
outcome (structure check, accept, finalize, discard) and evaluation (answer, review benchmark problems).
Deterministic problem handling lives in :mod:`nodes.atad.problems`."""
