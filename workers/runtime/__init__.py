"""The embedded runtime: a nats-server from the wheel, owned per data dir, and the data dir's
private files."""
