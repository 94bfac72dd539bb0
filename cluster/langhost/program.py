"""Runs one Pulumi Python program for cluster/langhost/host.py's `Run`, in a fresh interpreter (the
program's own: its virtualenv's python, or the harness's).

    python -u program.py --monitor ADDR --engine ADDR --project P --stack S --pwd DIR --dry_run true|false \
        --parallel N [--root_directory DIR] [--organization O] ENTRY_POINT [ARGS...]
    env: PULUMI_CONFIG (JSON object), PULUMI_CONFIG_SECRET_KEYS (JSON list)

The same arguments Pulumi's own host passes its executor (sdk/python/cmd/pulumi-language-python/main.go
`constructArguments`, read at v3.260 development: cluster/langhost/__init__.py). The runtime is set up
the way the installed SDK's Automation API sets it up for an inline program (pulumi/automation/_server.py
`LanguageServer.Run`: the settings, the config with its secret keys, an event loop whose default
executor has 4 x parallel threads, `run_in_stack`), and the entry point runs with `runpy.run_path` as `__main__`, as `python ENTRY` would.

Exit 0: the program ran. Exit 32: it failed and the error is already reported to the engine (as a
`pulumi.log.error`), so the host tells the engine to bail without another message (Pulumi's host
treats 32 the same). Standard library and the program's `pulumi` SDK only: it runs in the program's
interpreter, which has nothing of this repository.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import runpy
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor

# "An error message was shown to the user" (Pulumi's host: pythonProcessExitedAfterShowingUserActionableMessage).
BAIL = 32


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="program.py", description="run a Pulumi Python program for the engine")
    for flag in ("monitor", "engine", "project", "root_directory", "stack", "pwd", "dry_run", "parallel",
                 "organization", "tracing"):
        ap.add_argument(f"--{flag}")
    ap.add_argument("program")
    ap.add_argument("args", nargs="*")
    return ap.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    # The program's own directory comes first on sys.path (runpy.run_path of a directory adds it too);
    # this file's directory must not: its module names would shadow the program's.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    if args.pwd:
        os.chdir(args.pwd)

    import pulumi
    import pulumi.runtime as runtime

    runtime.set_all_config(runtime.get_config_env(), runtime.get_config_secret_keys_env())
    parallel = int(args.parallel) if args.parallel else None
    runtime.configure(runtime.Settings(
        project=args.project, stack=args.stack, monitor=args.monitor, engine=args.engine, parallel=parallel,
        dry_run=args.dry_run == "true", organization=args.organization or "organization",
        root_directory=args.root_directory))

    sys.argv = [args.program, *args.args]
    program = os.path.abspath(args.program)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    executor = ThreadPoolExecutor(max_workers=max(parallel or 1, 1) * 4)
    loop.set_default_executor(executor)
    # A failed resource leaves futures nobody awaits; asyncio would log each one (the SDK's inline
    # server silences it the same way: _server.py _suppress_unobserved_task_logging).
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)

    def run() -> None:
        runpy.run_path(program, run_name="__main__")

    code = 1
    try:
        loop.run_until_complete(runtime.run_in_stack(run))
        code = 0
    except pulumi.RunError as e:
        pulumi.log.error(str(e))
        code = BAIL
    except Exception:  # noqa: BLE001 - whatever the program raised is reported to the engine
        pulumi.log.error("Program failed with an unhandled exception:\n" + traceback.format_exc())
        code = BAIL
    finally:
        # What a failure left pending is cancelled and run to its end, so closing the loop reports
        # no "Task was destroyed but it is pending" (as the SDK's inline server does).
        for task in asyncio.all_tasks(loop):
            task.cancel()
            try:
                loop.run_until_complete(task)
            except BaseException:  # noqa: BLE001 - CancelledError, or the failure already reported
                pass
        executor.shutdown(wait=True)
        loop.close()
        sys.stdout.flush()
        sys.stderr.flush()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
