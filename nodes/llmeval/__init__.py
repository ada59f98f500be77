"""Nodes of the LLMEval-3 exam graph (seed 002), by role: session (sampling, quota), examinee (target and
reference answers), judge (0-3 stars, Figure 11), scoring (equations 1-2) and augmentation (appendix A.2);
bankio imports and exports the question bank (used by the nodes and by ``protocols/llmeval``)."""
