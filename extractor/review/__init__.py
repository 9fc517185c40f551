"""Human review: listing, showing, approving and rejecting candidates; only people write approved records."""
