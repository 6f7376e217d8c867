"""The ``memstream`` admin CLI (typer + rich): parses, calls the public API or workers, prints."""
