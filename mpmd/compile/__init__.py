"""Stage 3 of a step, compile: every fragment of a partitioned program
compiled through PJRT, and the runnable `Program` built from them.

In the order `compile_program` meets them:

* `mpmd.compile.compile_program` -- `compile_program`: compile every
  fragment and build the `Program`, in the parts below.
* `mpmd.compile.compile_plan` -- the programs the laid-out program needs (its
  layouts decided by the partition stage, `mpmd.partition.layouts`),
  compiled in one go, and each instruction's plan.
* `mpmd.compile.fragment_cache` -- the fragment compile cache: one program
  per distinct (function, mesh, shardings), compiled in parallel, loaded on
  meshes of the same shape, warmed up (`mpmd.compile.warmup`).
* `mpmd.compile.fragment` -- one fragment program (a StableHLO module
  SPMD-partitioned over the devices of one mesh): `compile_fragment`,
  `FragmentExecutable`.
* `mpmd.compile.constants` -- the constant inputs the runtime makes itself.
* `mpmd.compile.transfers` -- the transfer plan: a copy within this
  process, a collective or a pull between processes.
* `mpmd.compile.assemble` -- the runtime instructions, output fix-ups and
  the one `ProgramParts` value a `Program` is built from.
* `mpmd.compile.memory` -- per-mesh memory of a compiled program, estimated
  and measured (`Compiled.memory_report`).

Next: `mpmd.run`.
"""
