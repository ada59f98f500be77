"""Sample agents to evaluate (docs/agents.md): a retrieval agent over JudgeAgent's sample knowledge base and its
tool-less twin, so that a run shows what retrieval changes."""
