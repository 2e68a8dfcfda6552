"""Retrieval: a query becomes ranked Search Hits, and the hits that fit the budget become labelled Evidence."""
