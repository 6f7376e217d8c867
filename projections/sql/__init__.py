"""The SQL both read-model engines run, written once: queries and writes whose statements differ
only in what a :class:`~memstream.projections.sql.dialect.Dialect` says (parameters, collation).
The engines' own modules (``sqlite/``, ``postgres/``) bind these to their connections and keep
only what really differs: schema and migrations, full-text search, bulk forms, damage checks,
connections and locks."""
