"""Answering without a model: the extractive answerer, the passage baseline, their scoring, and abstention."""
