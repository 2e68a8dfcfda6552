"""Stand-ins for outside services, run for real on loopback ports."""
