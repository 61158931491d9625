"""Calling a compiled program: its flat arguments and outputs at call time.

Everything a call of a `Compiled` (or of an `mpmd.jit` function) does with
the caller's values before and after the program runs, in one place:

* `Signature` -- the flat inputs and outputs of a partitioned program:
  structure, avals, which arguments the program keeps, donation, meshes,
  layouts; flattening a call, checking it, wrapping the outputs.
* `check_not_traced` -- calls under a JAX transformation are refused.
* `SteadyInputs` -- the steady-state path: a step's outputs fed to the next
  step recognised in a few passes over the arguments that run in C.
* `ProgramInputs` -- argument placement: each kept argument on its mesh with
  its compiled sharding (copied where donated, checked for devices, deleted
  and twice-donated arrays), which is what the checked path runs.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
from jax.sharding import NamedSharding, Sharding

from mpmd import distributed as dist
from mpmd._jax import lowering as jl
from mpmd.config import MpmdConfig
from mpmd.errors import MpmdError
from mpmd.trace.tracing import MpmdLoweringResult
from mpmd.trace.prng_keys import KeyBoundary
from mpmd.partition.sharding import ArgumentPlacement, check_fits, host_side, on_mesh, reuse_shards

if TYPE_CHECKING:
  from mpmd.partition.partitioner import MeshHints, PartitionedProgram

__all__ = ["NOT_TRACEABLE", "ProgramInputs", "Signature", "SteadyInputs", "argument_path",
           "check_not_traced", "dtype_of"]


def dtype_of(x: Any) -> Any:
  """The dtype of an argument (a RemoteArray, array or Python scalar)."""
  if isinstance(x, dist.RemoteArray):
    return x.dtype
  return jax.numpy.result_type(x)


def _leaf_paths(in_tree: Any) -> list[str]:
  """How errors name each leaf of `(args, kwargs)` with structure `in_tree`:
  `args[0]['w']`, `kwargs['x']`."""
  tree = jax.tree_util.tree_unflatten(in_tree, [0] * in_tree.num_leaves)
  return [("args" if first.idx == 0 else "kwargs") + jax.tree_util.keystr(tuple(rest))
          for (first, *rest), _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


def argument_path(in_tree: Any, i: int) -> str:
  """How errors name flat argument `i` of `(args, kwargs)` with structure
  `in_tree`: `args[0]['w']`, `kwargs['x']`."""
  return _leaf_paths(in_tree)[i]


def _structure_difference(expected: Any, got: Any, limit: int = 4) -> str:
  """What differs between two `(args, kwargs)` structures, for messages."""
  want_args = jax.tree_util.tree_unflatten(expected, [0] * expected.num_leaves)[0]
  got_args = jax.tree_util.tree_unflatten(got, [0] * got.num_leaves)[0]
  parts = []
  if len(want_args) != len(got_args):
    parts.append(f"it takes {len(want_args)} positional (non-static) arguments, got "
                 f"{len(got_args)}")
  want, have = _leaf_paths(expected), _leaf_paths(got)
  want_set, have_set = set(want), set(have)
  missing = [p for p in want if p not in have_set]
  extra = [p for p in have if p not in want_set]
  for what, paths in (("missing", missing), ("unexpected", extra)):
    if paths:
      more = f" and {len(paths) - limit} more" if len(paths) > limit else ""
      parts.append(f"{what} {', '.join(paths[:limit])}{more}")
  return "; ".join(parts) or ("the same leaves in other containers (e.g. a list where the "
                              "program had a tuple, or a None)")


# ---------------------------------------------------------------------------
# The program's signature
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Signature:
  """The flat inputs and outputs of a partitioned program.

  Flat arguments are the leaves of the non-static `(args, kwargs)`; JAX
  prunes unused ones, so the program's input `k` is flat argument `kept[k]`.
  This object owns that map and everything per argument or output that
  `Lowered`, `Compiled`, the memory report and the runtime need.

  Attributes:
    in_tree / out_tree: pytree definitions of `(args, kwargs)` and outputs.
    in_avals / out_avals: shape and dtype per flat argument / output.
    kept: per program input, its flat argument index.
    donated: per flat argument, whether the caller donates it.
    static_argnums / static_args: the static positional arguments.
    input_meshes: per flat argument, its mesh (None: unused).
    output_meshes: per flat output, its mesh.
    placement: how each flat argument is laid out on its mesh.
    out_shardings: output index -> the sharding the user asked for.
    keys: which flat arguments and outputs are typed PRNG keys (the program
      takes and returns their data).
  """
  in_tree: Any
  out_tree: Any
  in_avals: tuple[Any, ...]
  out_avals: tuple[Any, ...]
  kept: tuple[int, ...]
  donated: tuple[bool, ...]
  static_argnums: tuple[int, ...]
  static_args: tuple[Any, ...]
  input_meshes: tuple[str | None, ...]
  output_meshes: tuple[str, ...]
  placement: ArgumentPlacement
  out_shardings: Mapping[int, NamedSharding]
  keys: KeyBoundary = KeyBoundary()

  @classmethod
  def build(cls, config: MpmdConfig, lowering: MpmdLoweringResult,
            program: PartitionedProgram, hints: MeshHints, static_argnums: tuple[int, ...],
            static_args: tuple[Any, ...]) -> "Signature":
    """The signature of the partitioned `program` for `lowering`."""
    num_in = len(lowering.in_avals)
    meshes: list[str | None] = [None] * num_in
    for k, i in enumerate(lowering.kept_var_idx):
      meshes[i] = program.input_meshes[k]
    explicit = [None if leaf is None or meshes[i] is None else
                on_mesh(f"in_shardings for argument {i}", leaf, meshes[i],
                        config.topology[meshes[i]])
                for i, leaf in enumerate(hints.in_leaves)]
    out_shardings = {j: on_mesh(f"out_shardings for output {j}", leaf, program.output_meshes[j],
                                config.topology[program.output_meshes[j]])
                     for j, leaf in enumerate(hints.out_leaves) if leaf is not None}
    for i, s in enumerate(explicit):
      if s is not None:
        check_fits(f"in_shardings for argument {i}", s, lowering.in_avals[i].shape)
    for j, s in out_shardings.items():
      check_fits(f"out_shardings for output {j}", s, lowering.out_avals[j].shape)
    donated = tuple(bool(d) for d in lowering.donated_invars) or (False,) * num_in
    return cls(in_tree=lowering.in_tree, out_tree=lowering.out_tree,
               in_avals=tuple(lowering.in_avals), out_avals=tuple(lowering.out_avals),
               kept=tuple(lowering.kept_var_idx), donated=donated,
               static_argnums=tuple(static_argnums), static_args=tuple(static_args),
               input_meshes=tuple(meshes), output_meshes=tuple(program.output_meshes),
               placement=ArgumentPlacement(meshes, explicit, config.topology),
               out_shardings=out_shardings, keys=lowering.keys)

  # -- program inputs (kept arguments) --------------------------------------

  @property
  def kept_donated(self) -> tuple[bool, ...]:
    """Per program input, whether the caller donates it."""
    return tuple(self.donated[i] for i in self.kept)

  @property
  def kept_avals(self) -> tuple[Any, ...]:
    """Per program input, its shape and dtype."""
    return tuple(self.in_avals[i] for i in self.kept)

  def arg_shardings(self, leaves: Sequence[Any]) -> list[Sharding | None]:
    """Per flat argument, the sharding a program compiled for `leaves` takes."""
    return [self.placement.sharding(i, x) for i, x in enumerate(leaves)]

  def layout_key(self, leaves: Sequence[Any]) -> tuple:
    """A hashable key of the input layouts `arg_shardings(leaves)` gives."""
    return tuple(self.placement.key(i, x) for i, x in enumerate(leaves))

  # -- calling ---------------------------------------------------------------

  def split_args(self, args: tuple) -> tuple[tuple, tuple]:
    """(dynamic, static) positional arguments."""
    static = self.static_argnums
    return (tuple(a for i, a in enumerate(args) if i not in static),
            tuple(a for i, a in enumerate(args) if i in static))

  def flatten(self, args: tuple, kwargs: dict) -> list:
    """The flat arguments of a call; raises if statics or structure differ."""
    dynamic, statics = self.split_args(args)
    if statics != self.static_args:
      raise MpmdError(f"static arguments {statics!r} differ from those the program was compiled "
                      f"for ({self.static_args!r}): lower and compile again")
    leaves, tree = jax.tree_util.tree_flatten((dynamic, kwargs))
    if tree != self.in_tree:
      raise MpmdError(f"arguments have structure {tree} but the program was compiled for "
                      f"{self.in_tree}: {_structure_difference(self.in_tree, tree)}; call the "
                      "mpmd.jit function instead (it compiles again for a new structure), or "
                      "lower and compile again with these arguments")
    return leaves

  def unwrap_keys(self, leaves: Sequence[Any]) -> Sequence[Any]:
    """The flat arguments as the program takes them: typed PRNG keys as their
    data (`KeyBoundary.unwrap`; raises for a non-key where a key was traced)."""
    return self.keys.unwrap(leaves, self._paths) if self.keys.inputs else leaves

  def path(self, leaves: Sequence[Any], i: int) -> str:
    """How errors name flat argument `i`: `args[0]['w']`, `kwargs['x']`."""
    return self._paths[i]

  @functools.cached_property
  def _paths(self) -> list[str]:
    return _leaf_paths(self.in_tree)

  @functools.cached_property
  def _expected(self) -> tuple[tuple[tuple[int, ...], Any], ...]:
    """Per flat argument, the (shape tuple, dtype) an array must have."""
    return tuple((tuple(aval.shape), aval.dtype) for aval in self.in_avals)

  def check_avals(self, leaves: Sequence[Any]) -> None:
    """Raises, naming the argument, if a shape or dtype differs.

    Arrays with exactly the expected shape and dtype pass on two attribute
    reads (the common case: the previous step's outputs); anything else
    (Python scalars, arrays JAX would convert, wrong arguments) takes the
    full check."""
    for i, (shape, dtype) in enumerate(self._expected):
      x = leaves[i]
      try:
        if x.shape == shape and x.dtype == dtype:
          continue
      except AttributeError:
        pass
      self._check_aval(leaves, i)

  def _check_aval(self, leaves: Sequence[Any], i: int) -> None:
    aval, x = self.in_avals[i], leaves[i]
    shape, dtype = np.shape(x), dtype_of(x)
    if tuple(shape) != tuple(aval.shape) or dtype != aval.dtype:
      raise MpmdError(f"argument {self.path(leaves, i)} has shape {tuple(shape)} and dtype "
                      f"{dtype} but the program was compiled for {tuple(aval.shape)} "
                      f"{aval.dtype}: call mpmd.jit(...) (which recompiles) or lower again")

  def unflatten_outputs(self, outputs: Sequence[Any]) -> Any:
    """The pytree of per-output values (e.g. shardings) in output order."""
    return jax.tree_util.tree_unflatten(self.out_tree, list(outputs))

  def outputs(self, flat: Sequence[Any]) -> Any:
    """The caller's outputs from the program's: key outputs wrapped back
    into typed PRNG key arrays, as a pytree."""
    if self.keys.outputs:
      flat = self.keys.wrap(flat)
    return jax.tree_util.tree_unflatten(self.out_tree, list(flat))

# ---------------------------------------------------------------------------
# Calls under a JAX transformation
# ---------------------------------------------------------------------------


#: Why an mpmd.jit function or a `Compiled` cannot be called under a JAX
#: transformation, and what to do instead.
NOT_TRACEABLE = ("mpmd.jit programs run on concrete arrays and cannot be traced by jax.jit, "
                 "jax.grad or jax.vmap. Call it at the top level and differentiate inside the "
                 "step (e.g. jax.value_and_grad inside the function)")


def check_not_traced(what: str, leaves: Sequence[Any], in_tree: Any) -> None:
  """Raises `MpmdError`, naming the argument, when `what` (an mpmd.jit
  function or its `Compiled`) is called under jax.jit, grad or vmap: with a
  traced argument, or with none while a trace is active (running then would
  bake this step's outputs into the caller's program as constants)."""
  for i, x in enumerate(leaves):
    if isinstance(x, jax.core.Tracer):
      raise MpmdError(f"{what} was called with a traced value as argument "
                      f"{argument_path(in_tree, i)}: {NOT_TRACEABLE}")
  if jl.under_transformation():
    raise MpmdError(f"{what} was called inside a JAX transformation (jax.jit, jax.grad, "
                    f"jax.vmap, ...): {NOT_TRACEABLE}")


# ---------------------------------------------------------------------------
# The steady-state path
# ---------------------------------------------------------------------------

_AVAL = operator.attrgetter("aval")
_SHARDING = operator.attrgetter("sharding")
_IS_DELETED = operator.methodcaller("is_deleted")


def _getter(indices: Sequence[int]) -> Callable[[Sequence[Any]], Sequence[Any]]:
  """`seq -> [seq[i] for i in indices]`, as one C call where it can be."""
  indices = tuple(indices)
  if len(indices) >= 2:
    return operator.itemgetter(*indices)
  if len(indices) == 1:
    (i,) = indices
    return lambda seq: (seq[i],)
  return lambda seq: ()


class SteadyInputs:
  """Recognises a call whose arguments are laid out as a checked call left them.

  A training loop calls a compiled step again and again with the previous
  step's outputs: the same array classes, the same avals and the same
  sharding objects every time. `accept` recognises such a call with a few
  passes over the flat arguments that run in C (`map` over attribute
  getters, list comparisons that succeed on identity), instead of a Python
  loop of checks per argument. Anything it does not recognise (a new
  sharding, a Python scalar, a deleted array, a donated array passed twice)
  returns None, and the caller takes the checked path (`ProgramInputs.place`),
  which says what is wrong or places the argument.

  Args:
    kept: per program input, its flat argument index.
    shardings: per program input, the sharding it must have.
    donated: per program input, whether the caller donates it.
    avals: per program input, the aval it must have (shape and dtype count).
    unused: (flat index, shape, dtype) of the arguments the program does
      not read, which must still have the shape and dtype it was compiled for.
  """

  def __init__(self, kept: Sequence[int], shardings: Sequence[Sharding],
               donated: Sequence[bool], avals: Sequence[Any],
               unused: Sequence[tuple[int, tuple[int, ...], Any]] = ()):
    self._take = _getter(kept)
    self._shardings = list(shardings)
    self._expected = [(tuple(a.shape), a.dtype) for a in avals]
    self._take_donated = _getter([k for k, d in enumerate(donated) if d])
    self._take_others = _getter([k for k, d in enumerate(donated) if not d])
    self._num_donated = sum(map(bool, donated))
    self._unused = tuple(unused)
    #: Array classes the checked path accepted as they were (a class not
    #: here, e.g. a Tracer or a NumPy array, takes the checked path).
    self.array_types: set[type] = set()
    #: The avals and shardings of the last accepted call: the next step's
    #: arguments usually carry the very same objects.
    self._known_avals: list | None = None
    self._known_shardings = list(self._shardings)
    self.read_first(())

  def read_first(self, positions: Sequence[int]) -> None:
    """Names the inputs (positions in the program's inputs) that the
    program's first instructions read while the rest is checked
    (`mpmd.run.program.Program.early_inputs`): `placed` checks them first."""
    self._take_first = _getter(positions)
    self._first_shardings = list(self._take_first(self._shardings))

  def placed(self, xs: Sequence[Any]) -> bool:
    """Whether the inputs `read_first` named are live arrays of accepted
    classes with their compiled shardings: all that dispatching a fragment
    needs of the arguments it reads. Checked before those fragments run, so
    that a misplaced or deleted argument is found without an exception."""
    first = self._take_first(xs)
    return (self.array_types.issuperset(map(type, first)) and not any(map(_IS_DELETED, first))
            and list(map(_SHARDING, first)) == self._first_shardings)

  def take(self, leaves: Sequence[Any]) -> Sequence[Any]:
    """The program inputs among the flat arguments, unchecked."""
    return self._take(leaves)

  def accept_taken(self, xs: Sequence[Any], leaves: Sequence[Any]) -> bool:
    """Whether the inputs `xs` (`take(leaves)`) are live arrays of accepted
    classes with the compiled shapes, dtypes and shardings, no donated
    array is passed twice or also undonated, and the unread arguments keep
    their shapes and dtypes."""
    if not self.array_types.issuperset(map(type, xs)) or any(map(_IS_DELETED, xs)):
      return False
    avals = list(map(_AVAL, xs))
    if avals != self._known_avals:
      if not all(a.shape == shape and a.dtype == dtype
                 for a, (shape, dtype) in zip(avals, self._expected)):
        return False
      self._known_avals = avals
    shardings = list(map(_SHARDING, xs))
    if shardings != self._known_shardings:
      if shardings != self._shardings:
        return False
      self._known_shardings = shardings
    if self._num_donated:
      donated = set(map(id, self._take_donated(xs)))
      if (len(donated) != self._num_donated  # a donated array passed twice
          or not donated.isdisjoint(map(id, self._take_others(xs)))):  # or also undonated
        return False
    for i, shape, dtype in self._unused:
      x = leaves[i]
      if getattr(x, "shape", None) != shape or getattr(x, "dtype", None) != dtype:
        return False
    return True

  def accept(self, leaves: Sequence[Any]) -> list[jax.Array] | None:
    """The program's inputs (the kept arguments, as they are) when
    `accept_taken` holds; else None."""
    xs = self._take(leaves)
    return list(xs) if self.accept_taken(xs, leaves) else None


# ---------------------------------------------------------------------------
# Argument placement (the checked path)
# ---------------------------------------------------------------------------


def _copy(x: Any) -> Any:
  """A copy of `x` in a buffer of its own (on the same devices)."""
  return jax.numpy.copy(x) if isinstance(x, jax.Array) else x


class ProgramInputs:
  """How a call's flat arguments become a compiled program's inputs.

  Args:
    signature: the program's `Signature`.
    shardings: per program input, the sharding it was compiled for.
    runs: whether this process runs a mesh; arguments on meshes of other
      processes are placed by those processes (multi-process).

  Attributes:
    kept: per program input, (flat argument index, sharding, donated, placed
      by this process).
    all_local: whether this process places every input.
    steady: the steady-state check of the arguments (`SteadyInputs`).
  """

  def __init__(self, signature: Signature, shardings: Sequence[Sharding],
               runs: Callable[[str | None], bool]):
    sig = self.signature = signature
    self.kept = tuple((i, shardings[k], sig.donated[i], runs(sig.input_meshes[i]))
                      for k, i in enumerate(sig.kept))
    self.all_local = all(local for *_, local in self.kept)
    kept = set(sig.kept)
    self.steady = SteadyInputs(
        sig.kept, shardings, sig.kept_donated, sig.kept_avals,
        [(i, tuple(a.shape), a.dtype) for i, a in enumerate(sig.in_avals) if i not in kept])

  def place(self, leaves: Sequence[Any]) -> list[jax.Array | None]:
    """The program's inputs: each kept argument on its mesh with its sharding
    (device_put where it is not there yet; None where another process
    places it). Raises before anything runs."""
    if self.all_local:
      fast = self.steady.accept(leaves)
      if fast is not None:
        return fast
    sig = self.signature
    inputs = []
    donated_ids: dict[int, int] = {}
    for i, sharding, donated, local in self.kept:
      x = leaves[i]
      if not local:  # a mesh of other processes: they place it
        inputs.append(None)
        continue
      if isinstance(x, dist.RemoteArray):
        raise dist.DistributedError(
            f"argument {sig.path(leaves, i)} is a RemoteArray of mesh {x.mesh!r} (processes "
            f"{list(x.processes)}), but this program places it on a mesh this process runs: pass "
            "the value itself (mpmd.distributed.gather(x)) or keep it on the same mesh")
      if isinstance(x, jax.Array):
        if x.is_deleted():
          raise MpmdError(f"argument {sig.path(leaves, i)} has been deleted or donated (to an "
                          "earlier call that donates it): pass a live array; nothing ran")
        if x.sharding == sharding:
          self.steady.array_types.add(type(x))  # as compiled (a step's outputs fed to the next)
        else:
          sig.placement.check_devices(x, sig.path(leaves, i))
          # A donated input is consumed: it must not share the caller's
          # buffer (device_put may alias it even with may_alias=False).
          reused = None if donated else reuse_shards(x, sharding)
          x = reused if reused is not None else jax.device_put(
              _copy(x) if donated else host_side(x, sharding), sharding)
        if donated and x is leaves[i]:
          other = donated_ids.setdefault(id(x), i)
          if other != i:
            raise MpmdError(f"the same array is passed as arguments {sig.path(leaves, other)} "
                            f"and {sig.path(leaves, i)}, and donated: donation consumes it; "
                            f"pass a copy")
      else:
        x = jax.device_put(x, sharding)
      inputs.append(x)
    if donated_ids:
      for i, _, donated, _ in self.kept:
        if not donated and id(leaves[i]) in donated_ids:
          raise MpmdError(f"the same array is passed as arguments "
                          f"{sig.path(leaves, donated_ids[id(leaves[i])])} (donated) and "
                          f"{sig.path(leaves, i)}: donation consumes it; pass a copy")
    return inputs

  def copies(self, leaves: Sequence[Any]) -> list[jax.Array]:
    """The program's inputs as copies of the arguments (nothing the caller
    holds is consumed), for a run that must leave them as they are."""
    return [jax.device_put(_copy(leaves[i]), sharding) for i, sharding, _, _ in self.kept]
