"""A conversation's outcome, derived by code when it goes quiet (docs/OUTCOMES.md): rules, facts, store, sweep."""
