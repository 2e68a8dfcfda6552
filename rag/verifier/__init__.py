"""Verification: labels mapped back to real places, statements checked against what they cite, saved answers re-checked."""
