"""The copy loops (Python and native), record limits, exactly-once, copy threads."""
