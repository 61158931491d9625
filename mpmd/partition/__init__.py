"""Stage 2 of a step, partition: the C++ partitioner makes the per-mesh
program.

* `mpmd.partition.sharding` -- how each input and output is laid out on the
  devices of its mesh.
* `mpmd.partition.partitioner` -- mesh hints, the typed request, the two
  calls into C++ (`mpmd._mpmd`) and the answer as one `PartitionedProgram`.
* `mpmd.partition.dispatch_cost` -- what a program call costs on each
  platform (measured), by which back-to-back units merge into one program.
* `mpmd.partition.layouts` -- the layout decision, once the input shardings
  are known (`Lowered.compile`): every value's sharding, Shardy's
  propagation through each fragment, and each fragment's text annotated for
  the compile stage; `mpmd.partition.partial` reads the partial-sum marks
  it follows.

The schedule a partition applies is resolved by `mpmd.schedule.resolve`.
Next: `mpmd.compile`.
"""
