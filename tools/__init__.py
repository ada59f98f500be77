"""Retrieval tools the agents call (entity lookup, knowledge-path sampling, chunk search)."""
