"""The only code of `mpmd` that touches JAX internals.

Everything else in the package uses public JAX APIs plus the helpers of the
modules here; nothing outside this package imports ``jax._src``,
``jax.interpreters``, ``jax.core`` internals or ``jaxlib`` (enforced by
test/python/test_layout.py). A JAX upgrade is therefore one place to change.
Written against jax/jaxlib 0.10.2.

The modules, by the stage of a step they serve:

* :mod:`mpmd._jax.lowering` -- tracing and lowering: mpmd's primitives and
  their rules (call, identity and marker primitives), the MPMD lowering
  parameters (:func:`~mpmd._jax.lowering.lower_for_mpmd`), MLIR lowering
  helpers, and the exclusion of mpmd's frames from user tracebacks.
* :mod:`mpmd._jax.jaxpr` -- jaxpr surgery for the JaxPP front end
  (:mod:`mpmd.jaxpp`): tracing to a jaxpr, slicing and inlining.
* :mod:`mpmd._jax.executable` -- the runtime: parsing, annotating, compiling
  and dispatching fragment programs, and the coordination service client of
  multi-process runs.
* :mod:`mpmd._jax.mlir_text` -- `python -m mpmd.opt`: JAX's readable MLIR
  text to generic form and back, with jaxlib's MLIR bindings.

Callers import the module they need (``from mpmd._jax import lowering as
jl``); this package re-exports nothing.
"""
