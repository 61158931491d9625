"""mpmd."""
