"""Stores: Chroma vectors, context-graph persistence, question bank, checkpoints, results."""
