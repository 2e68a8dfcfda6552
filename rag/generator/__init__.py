"""Generation: the Generator interface, the registry of backends, and the OpenAI-compatible and local backends."""
