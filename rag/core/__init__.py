"""Shared by every stage: the records that flow between stages, errors, settings, path rules, the one atomic write and the one text analyser."""
