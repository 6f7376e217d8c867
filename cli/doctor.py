"""``memstream doctor``: check the deployment, say what is wrong and what mends it."""

from __future__ import annotations

from typing import Annotated

import typer

from memstream import admin
from memstream.admin import Finding
from memstream.cli.context import connected, run, settings_of
from memstream.cli.output import emit_json, note, stdout


def doctor(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
) -> None:
    """Check the log servers' fsync policy, the read model against the log, dead letters, lag,
    the stream's replicas and the servers' versions.

    Prints each finding, and for each one that is wrong the command that mends it. Exits 0
    when nothing is wrong, 1 when something is.

    Example: memstream doctor --json
    """
    settings = settings_of(ctx)

    async def main() -> list[Finding]:
        async with connected(settings, workers=False, check_log=False) as ms:
            return await admin.doctor(ms)

    findings = run(main())
    wrong = [f for f in findings if not f.ok]
    if as_json:
        emit_json({"ok": not wrong, "findings": [f.as_json() for f in findings]})
    else:
        console = stdout()
        for finding in findings:
            mark = "ok  " if finding.ok else "FAIL"
            console.print(f"{mark} {finding.check}: {finding.detail}", markup=False)
            if finding.mend:
                console.print(f"     mend: {finding.mend}", markup=False)
    if wrong:
        note(f"error: {len(wrong)} problem(s) found")
        raise typer.Exit(1)
