"""Administration of the log and the read models: status, doctor, audit, export and import,
purge, rebuild and verify, time travel (their public face: :mod:`memstream.admin`)."""
