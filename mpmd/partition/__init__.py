"""Stage 2 of a step, partition: the C++ partitioner makes the per-mesh
program.

* `mpmd.partition.sharding` -- how each input and output is laid out on the
  devices of its mesh.
* `mpmd.partition.partitioner` -- mesh hints, the typed request, the two
  calls into C++ (`mpmd._mpmd`) and the answer as one `PartitionedProgram`.
* `mpmd.partition.dispatch_cost` -- what a program call costs on each
  platform (measured), by which back-to-back units merge into one program.

The schedule a partition applies is resolved by `mpmd.schedule.resolve`.
Next: `mpmd.compile`.
"""
