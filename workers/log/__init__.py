"""The event-log client: the JetStream stream, its subjects and messages, the event contract,
commands on aggregates, and the eventsourcing adapter."""
