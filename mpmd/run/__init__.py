"""Stage 4 of a step, run: a call of a compiled program.

* `mpmd.run.calling` -- the caller's values at call time: the program's
  `Signature`, the steady-state path, argument placement.
* `mpmd.run.program` -- the instructions (`CallInstruction`,
  `TransferInstruction`, `CrossProcessTransferInstruction`), `ProgramParts`
  and `Program`, which runs them asynchronously; `max_inflight`.
* `mpmd.run.stuck` -- a fragment stuck behind one failed device (a host
  callback that raised on a multi-device mesh), named before XLA aborts.
* `mpmd.run.crossprocess` -- transfers between meshes of different
  processes (a pull, or one collective over both meshes' devices).
* `mpmd.run.timeline` -- runtime traces: when each fragment really ran
  (`Compiled.trace`).

The errors a run raises live in `mpmd.errors` (exported from `mpmd`).
"""
