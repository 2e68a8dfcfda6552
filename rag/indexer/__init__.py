"""Indexing: chunks to vectors and lexical statistics, re-doing only what changed, and which index serves which docs folder."""
