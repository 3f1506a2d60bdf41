"""What the check scripts share: run named checks, report each, and exit non-zero when
any failed (the rest still run)."""

import sys
import traceback


def run_checks(checks, only, label):
    """Runs `checks` ((name, fn) pairs; only those named in `only` when it is not
    empty), printing `ok: <name>` or `FAILED: <name>` and the traceback for each, then
    `all <label> checks passed`; exits non-zero when any failed."""
    failed = []
    for name, fn in checks:
        if only and name not in only:
            continue
        try:
            fn()
        except Exception:
            failed.append(name)
            print(f"FAILED: {name}\n{traceback.format_exc()}", flush=True)
            continue
        print(f"ok: {name}", flush=True)
    if failed:
        sys.exit(f"{len(failed)} {label} checks failed: {', '.join(failed)}")
    print(f"all {label} checks passed" if not only else f"selected {label} checks passed")
