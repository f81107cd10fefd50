"""Share links: a read-only page of one result for people without an account."""
