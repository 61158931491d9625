"""Stage 1 of a step, trace: from the user's labelled function to StableHLO
text carrying `mpmd.*` ops.

* `mpmd.trace.ops` -- the labels as JAX primitives: `named_computation`,
  `named_tensor`, `call`, `fori_loop`, `broadcast`, `reduce`.
* `mpmd.trace.label` -- labelling the layers of a model you cannot edit
  (`label_layers`, `stage_names`).
* `mpmd.trace.prng_keys` -- typed PRNG keys at the program's boundary.
* `mpmd.trace.tracing` -- `trace_and_lower`: abstract the arguments, trace
  with `jax.jit` and lower with the MPMD rules (`mpmd._jax.lowering`).

Next: `mpmd.partition`.
"""
