"""Judge-check nodes: :mod:`.judges` runs a protocol's judging step by name; :mod:`.verdicts` holds the graph
nodes (judge an item with every judge, repeat and order; combine a jury's votes)."""
