"""Node functions grouped by role: plain (state, runtime) -> dict functions."""
