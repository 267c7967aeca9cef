"""Long-term memory records: their model, store, search, revisions and merges."""
