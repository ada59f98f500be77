"""Agent targets: a LangGraph graph or a ``(message, *, thread_id)`` app evaluated where a model is named.

:mod:`.reference` names and loads an agent, :mod:`.apps` drives one turn of it on a thread, :mod:`.record` bounds
what a turn emitted for the event log, and :mod:`.chat` presents an agent to the call layer
(:class:`runtime.llm.RoleLLM`) as a chat model that keeps the conversation rule (docs/agents.md).
"""
