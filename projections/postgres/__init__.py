"""PostgreSQL read models (psycopg 3): connections, the versioned schema, projector locks."""
