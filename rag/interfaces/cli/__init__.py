"""The `rag` command line: one thin command per library call, one line per error."""
