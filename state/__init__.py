"""State and configuration schemas (typed), shared item and result types."""
