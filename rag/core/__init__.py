"""Shared by every stage: the records that flow between stages, errors, settings, path rules and the one text analyser."""
