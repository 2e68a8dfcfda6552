"""What users and agents call: the command line, the HTTP server, MCP and watch mode, each thin over the pipeline."""
