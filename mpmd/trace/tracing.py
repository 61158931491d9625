"""Tracing and MPMD lowering of a user function to StableHLO text with mpmd ops.

:func:`trace_and_lower` is the front end's entry to JAX: it abstracts the
arguments, traces the function with ``jax.jit`` and lowers it with the MPMD
lowerings of the labelling primitives active (``mpmd.named_computation``,
``mpmd.named_tensor``, ...).  The result carries the module as text in generic
op form with debug locations, the form handed to the C++ compiler.

(The JAX internals it uses, the MPMD lowering rules of the primitives among
them, are in `mpmd._jax.lowering`; `mpmd.run.timeline` is about something
else: when each fragment of a compiled program ran.)
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax

from mpmd._jax import lowering as jl
from mpmd.distributed import RemoteArray
from mpmd.trace.prng_keys import KeyBoundary, physical_aval
# Importing ops registers the labelling primitives' MPMD lowerings.
from mpmd.trace import ops as _ops  # noqa: F401  pylint: disable=unused-import

__all__ = ["MpmdLoweringResult", "abstractify", "lower_traced", "trace_and_lower"]


@dataclasses.dataclass(frozen=True)
class MpmdLoweringResult:
  """What :func:`trace_and_lower` produces.

  Attributes:
    text: The StableHLO module (with mpmd ops) in generic op form with debug
      locations.  Its ``main`` function takes the kept flat arguments (see
      ``kept_var_idx``) and returns the flat outputs.
    in_tree: Pytree definition of the non-static ``(args, kwargs)``; its leaves
      are the flat arguments.
    out_tree: Pytree definition of the outputs.
    in_avals: One ``jax.ShapeDtypeStruct`` per flat argument (all of them,
      including pruned ones); no shardings. A typed PRNG key argument has
      the aval of its ``uint32`` data, as ``main`` takes it.
    out_avals: One ``jax.ShapeDtypeStruct`` per flat output; no shardings
      (key outputs as their data, like key arguments).
    keys: Which flat arguments and outputs are typed PRNG keys.
    kept_var_idx: Indices of the flat arguments that are arguments of
      ``main`` (JAX prunes unused arguments unless ``keep_unused=True``).
    donated_invars: Per flat argument, whether it is donated.
    lowered: The underlying ``jax.stages.Lowered`` (for debugging).
  """

  text: str
  in_tree: Any
  out_tree: Any
  in_avals: list[jax.ShapeDtypeStruct]
  out_avals: list[jax.ShapeDtypeStruct]
  kept_var_idx: tuple[int, ...]
  donated_invars: tuple[bool, ...]
  keys: KeyBoundary = KeyBoundary()
  lowered: Any = dataclasses.field(default=None, repr=False, compare=False)


def abstractify(x: Any) -> Any:
  """Replaces an array leaf by a sharding-free ``jax.ShapeDtypeStruct``.

  ``jax.Array`` arguments may live on different device sets (different
  meshes); tracing them concretely would make JAX reject the mix, so only
  their shape, dtype and weak type are kept.  Other leaves (numpy arrays,
  Python scalars, existing ``ShapeDtypeStruct``) are returned unchanged.
  """
  if isinstance(x, jax.Array):  # (typed PRNG key arrays have no weak type)
    return jax.ShapeDtypeStruct(x.shape, x.dtype, weak_type=getattr(x, "weak_type", False))
  if isinstance(x, RemoteArray):  # an output of another process's mesh
    return jax.ShapeDtypeStruct(x.shape, x.dtype)
  return x


def lower_traced(traced: jax.stages.Traced) -> MpmdLoweringResult:
  """MPMD-lowers an already traced ``jax.jit`` function."""
  with warnings.catch_warnings():
    # Donation is decided per fragment by the MPMD compiler (from
    # `donated_invars`); JAX's whole-program aliasing check is meaningless here.
    warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
    lowered = jl.lower_for_mpmd(traced)
  args_info = jax.tree_util.tree_leaves(lowered.args_info)
  return MpmdLoweringResult(
      text=jl.module_to_text(lowered),
      in_tree=lowered.in_tree,
      out_tree=lowered.out_tree,
      in_avals=[physical_aval(a) for a in traced.jaxpr.in_avals],
      out_avals=[physical_aval(a) for a in traced.jaxpr.out_avals],
      kept_var_idx=jl.kept_var_indices(lowered),
      donated_invars=tuple(bool(a.donated) for a in args_info),
      keys=KeyBoundary.of(traced.jaxpr.in_avals, traced.jaxpr.out_avals),
      lowered=lowered,
  )


def trace_and_lower(
    fun: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any] | None = None,
    *,
    in_shardings: Any = None,
    out_shardings: Any = None,
    donate_argnums: int | Sequence[int] = (),
    static_argnums: int | Sequence[int] = (),
    keep_unused: bool = False,
) -> MpmdLoweringResult:
  """Traces ``fun(*args, **kwargs)`` with ``jax.jit`` and lowers it for MPMD.

  Array arguments are abstracted first (:func:`abstractify`), so they may live
  on different meshes; their shardings are dropped — pass ``in_shardings``
  (on one set of devices) to constrain the lowering.  Arguments at
  ``static_argnums`` are passed through untouched and must be hashable.

  Args:
    fun: The function to lower.
    args: Positional arguments (pytrees of arrays / ShapeDtypeStructs).
    kwargs: Keyword arguments (pytrees), or ``None``.
    in_shardings: Forwarded to ``jax.jit`` when not ``None``.
    out_shardings: Forwarded to ``jax.jit`` when not ``None``.
    donate_argnums: Forwarded to ``jax.jit``.
    static_argnums: Forwarded to ``jax.jit``.
    keep_unused: Forwarded to ``jax.jit``; when ``True`` every flat argument
      is kept (``kept_var_idx`` is then all indices).

  Returns:
    An :class:`MpmdLoweringResult`.
  """
  kwargs = dict(kwargs or {})
  static = ({static_argnums} if isinstance(static_argnums, int)
            else set(static_argnums))
  static = {i % len(args) if i < 0 else i for i in static} if args else static
  abstract_args = [
      a if i in static else jax.tree_util.tree_map(abstractify, a)
      for i, a in enumerate(args)
  ]
  abstract_kwargs = jax.tree_util.tree_map(abstractify, kwargs)
  jit_kwargs: dict[str, Any] = dict(
      donate_argnums=donate_argnums, static_argnums=static_argnums,
      keep_unused=keep_unused)
  if in_shardings is not None:
    jit_kwargs["in_shardings"] = in_shardings
  if out_shardings is not None:
    jit_kwargs["out_shardings"] = out_shardings
  traced = jax.jit(fun, **jit_kwargs).trace(*abstract_args, **abstract_kwargs)
  return lower_traced(traced)
