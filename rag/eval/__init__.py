"""Answer evaluation: the metrics of the eval contract and `rag eval`."""
