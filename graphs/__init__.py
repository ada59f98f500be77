"""One module per protocol: builds and compiles its StateGraph (exports builder and graph)."""
