"""With `--mismatch`: process 1 runs with MPMD_GLOO_ADMISSION=0, process 0
with the filter: process 0 fails at once in `initialize`, naming both.

Else: a run whose gloo connections are never admitted (the filter on gloo's
socket lets nothing in: `admit` does nothing), as if the other host saw
them under another address: the process that makes a connection reports it
within seconds, then ends, naming it (the gloo test of
test_faults_multiprocess.py, with a short MPMD_GLOO_ADMISSION_TIMEOUT)."""

import os
import sys

from mpmd.distributed import gloo_admission

if "--mismatch" in sys.argv:
  if os.environ.get("MPMD_PROCESS_ID") == "1":
    os.environ[gloo_admission.ENV_GLOO_ADMISSION] = "0"
else:
  gloo_admission._Guard.admit = lambda self, source: None  # noqa: SLF001

import jax  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402

import mpmd  # noqa: E402


def main() -> int:
  mpmd.distributed.initialize()
  print(f"process {jax.process_index()}: gloo admission on: {gloo_admission.status()['on']}",
        flush=True)
  multihost_utils.process_allgather(jax.numpy.arange(3))  # gloo connects here
  print(f"process {jax.process_index()}: the collective finished", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
