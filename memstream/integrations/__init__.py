"""Adapters to agent frameworks (each an optional extra: ``memstream[agents]``,
``memstream[langchain]``); importing one needs only memstream and its framework."""
