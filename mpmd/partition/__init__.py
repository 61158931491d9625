"""Stage 2 of a step, partition: the C++ partitioner makes the per-mesh
program.

* `mpmd.partition.sharding` -- how each input and output is laid out on the
  devices of its mesh.
* `mpmd.partition.partitioner` -- mesh hints, the typed request, the two
  calls into C++ (`mpmd._mpmd`) and the answer as one `PartitionedProgram`.

The schedule a partition applies is resolved by `mpmd.schedule.resolve`.
Next: `mpmd.compile`.
"""
