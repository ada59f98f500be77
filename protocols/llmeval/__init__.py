"""LLMEval-3 (seed 002): question bank, sampled exam sessions, LLM judge, relative ranking, exam server.

Modules: ``protocol`` (the batch protocol and CLI modes), ``metrics`` (variances, kappa, Spearman, Elo,
stability, contamination replay), ``analyses`` (leaderboard, stability, kappa, contamination), ``server``
(the FastAPI exam server). What the nodes need lives below them in ``nodes/llmeval/``: ``bankio``
(import/export, validation, near-duplicates), ``augment`` (appendix A.2) and equations 1-2 in ``scoring``.
"""
