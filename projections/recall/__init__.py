"""Agent Memory's recall, in one package: its inputs (the query's vector, topic keys and
window; the profile's cached vector indexes), its candidates and their ranking, memory search
terms, and the profile's summary. The read-model queries it runs are the backends'
(:class:`~memstream.projections.ports.MemoryQueries`)."""
