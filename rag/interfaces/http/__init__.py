"""`rag serve`: the HTTP API, its auth and limits, streaming, and the web page."""
