"""Runtime shared by every protocol: config loading, model factory, LLM call layer,
event log, batch runner and report rendering (homes for what the fixed layout has no folder for)."""
