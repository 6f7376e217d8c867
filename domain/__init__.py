"""The memstream domain: aggregates, events, limits and errors (pure: eventsourcing + stdlib)."""
