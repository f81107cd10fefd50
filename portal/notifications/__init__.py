"""Mail to people: invitations, password resets and (issue 12) run notifications."""
