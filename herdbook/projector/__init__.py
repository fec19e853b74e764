"""Pure folds, the read model, the SQLite view and its runner."""
