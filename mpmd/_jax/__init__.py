"""The only code of `mpmd` that touches JAX internals.

Everything else in the package uses public JAX APIs plus the helpers of the
modules here; nothing outside this package imports ``jax._src``,
``jax.interpreters``, ``jax.core`` internals or ``jaxlib`` (enforced by
test/python/test_layout.py). A JAX upgrade is therefore one place to change.
Supported: jax/jaxlib 0.10.2 to 0.12.0.1 (`make test` tests 0.12.0.1 on
Python 3.12, `make test-oldest` 0.10.2 on Python 3.11). Where releases
differ, the module that uses the internal checks which one it has (for the
feature, not the version number) and says so where it does. The JAX changes
that have a branch here:

* jax 0.11 removed "final style" call primitives (`core.ClosedCallPrimitive`):
  :mod:`mpmd._jax.lowering` (``_FINAL_STYLE_CALLS``) binds mpmd's call
  primitives on their jaxpr there.
* jax 0.12 folded ``ClosedJaxpr`` into ``Jaxpr`` (a jaxpr carries its consts;
  ``jax._src.core.ClosedJaxpr`` is gone): :mod:`mpmd._jax.lowering` and
  :mod:`mpmd._jax.jaxpr` use the public ``jax.extend.core.ClosedJaxpr``,
  which is the class on jax <= 0.11 and an alias of ``Jaxpr`` (with its
  ``ClosedJaxpr(jaxpr, consts)`` constructor) on 0.12, so one spelling serves
  both.

The modules, by the stage of a step they serve:

* :mod:`mpmd._jax.lowering` -- tracing and lowering: mpmd's primitives and
  their rules (call, identity and marker primitives), the MPMD lowering
  parameters (:func:`~mpmd._jax.lowering.lower_for_mpmd`), MLIR lowering
  helpers, and the exclusion of mpmd's frames from user tracebacks.
* :mod:`mpmd._jax.jaxpr` -- jaxpr surgery for the JaxPP front end
  (:mod:`mpmd.jaxpp`): tracing to a jaxpr, slicing and inlining.
* :mod:`mpmd._jax.parsing` -- a fragment program's MLIR module: parsing its
  text, its ``@main`` signature and aliased results.
* :mod:`mpmd._jax.annotation` -- the sharding and donation marks of a
  fragment program, as ``jax.jit`` writes them.
* :mod:`mpmd._jax.compiling` -- compiling a fragment program on a mesh,
  loading it on another mesh of the same shape, what it says about itself
  (shardings, HLO, costs, memory), the host callbacks of a lowered step.
* :mod:`mpmd._jax.persistent_cache` -- JAX's persistent compilation cache,
  checked to return each fragment's own program.
* :mod:`mpmd._jax.dispatch` -- the C++ call path of a compiled program, and
  the effect tokens of failed runs.
* :mod:`mpmd._jax.array_copy` -- same-layout copies between meshes in one
  C++ call.
* :mod:`mpmd._jax.unreduced` -- partial sums held unreduced (JAX's
  ``unreduced`` shardings and Shardy's constraints for them).
* :mod:`mpmd._jax.transfer_server` and :mod:`mpmd._jax.distributed_client` --
  multi-process runs: JAX's transfer server, the coordination service's
  key-value store.
* :mod:`mpmd._jax.mlir_text` -- `python -m mpmd.opt`: JAX's readable MLIR
  text to generic form and back, with jaxlib's MLIR bindings.

Callers import the module they need (``from mpmd._jax import lowering as
jl``); this package re-exports nothing.
"""
