"""Run one program as N processes on this machine: a local multi-process JAX run.

    python -m mpmd.launch --processes 2 --devices-per-process 4 train.py --steps 3
    python -m mpmd.launch --processes 2 -m mypkg.train --steps 3

starts N copies of `python train.py --steps 3`, each joined to one
multi-process JAX run (see `python -m mpmd.launch --help` and
docs/multiprocess.md). From Python: `launch(["train.py", "--steps", "3"],
processes=2)` returns a `LaunchResult`.

This is the public entry point; the launcher itself lives in
`mpmd.distributed.launch` (where its behaviour is documented), whose public
names are re-exported here.
"""

import sys

from mpmd.distributed.launch import (PLATFORMS, LaunchError, LaunchResult, child_environment,
                                     cpu_block, free_port, launch, main)

__all__ = ["PLATFORMS", "LaunchError", "LaunchResult", "child_environment", "cpu_block",
           "free_port", "launch", "main"]

if __name__ == "__main__":
  sys.exit(main())
