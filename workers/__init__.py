"""NATS JetStream side of memstream: the event log, aggregate store, and projector workers."""
