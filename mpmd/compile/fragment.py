"""Compile and run one fragment program on a subset of devices (design §6).

A *fragment program* is a StableHLO module (text, pretty or generic form, debug
locations allowed) whose public ``func.func @main`` takes and returns tensors of
GLOBAL shape. :func:`compile_fragment` compiles it SPMD-partitioned over the
devices of one ``jax.sharding.Mesh`` with given input shardings; the output
shardings not given are those Shardy's propagation gives
(:func:`mpmd.partition.layouts.lay_out_fragment` decides and annotates them;
:func:`compile_laid_out` compiles what it decided). A
:class:`FragmentExecutable` dispatches asynchronously through JAX's C++ fast
path and returns ``jax.Array``\\ s committed to the mesh. :func:`transfer` moves
an array to another mesh of the same process.

The JAX internals it needs live in :mod:`mpmd._jax` (parsing, annotation,
compiling, dispatch). The errors it raises are defined in :mod:`mpmd.errors`
(and importable from here too).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence

import jax
from jax.sharding import Mesh, Sharding

from mpmd._jax.compiling import (HostCallbacks, compile_module, executable_cost_analysis,
                                 executable_memory_analysis, executable_shardings,
                                 executable_text, load_on_mesh)
from mpmd._jax.dispatch import make_dispatch
from mpmd._jax.parsing import parse_fragment_module
from mpmd.errors import (FragmentArgumentError, FragmentCompileError,
                         FragmentExecutionError)
from mpmd.partition.layouts import (FragmentLayout, describe_devices, device_ids,
                                    lay_out_fragment)

__all__ = [
    "FragmentArgumentError",
    "FragmentCompileError",
    "FragmentExecutionError",
    "FragmentExecutable",
    "compile_fragment",
    "compile_laid_out",
    "transfer",
]


_IS_DELETED = operator.methodcaller("is_deleted")



class FragmentExecutable:
  """One compiled fragment program, bound to the devices of one mesh.

  Attributes:
    name: the fragment's name (used in every error message).
    mesh: the mesh it was compiled for.
    devices: ``mesh.devices`` flattened, in mesh order (the device assignment).
    input_shardings: the sharding each argument must have.
    output_shardings: the shardings of the results (those the partition
      stage decided), as read back from the compiled executable.
    in_avals / out_avals: global ``jax.ShapeDtypeStruct`` of args and results.
    num_inputs / num_outputs: arity.
    donated_args: argument indices whose buffers the call may consume.

  Calling it with ``jax.Array``\\ s placed as ``input_shardings`` dispatches the
  program asynchronously (no blocking) and returns the list of results.
  """

  __slots__ = ("name", "mesh", "devices", "input_shardings", "output_shardings",
               "in_avals", "out_avals", "num_inputs", "num_outputs",
               "donated_args", "_executable", "_dispatch")

  def __init__(self, name: str, mesh: Mesh, executable, in_avals, out_avals,
               donated_args: Sequence[int]):
    self.name = name
    self.mesh = mesh
    self.devices: tuple[jax.Device, ...] = tuple(mesh.devices.flat)
    in_s, out_s = executable_shardings(executable)
    self.input_shardings: tuple[Sharding, ...] = tuple(in_s)
    self.output_shardings: tuple[Sharding, ...] = tuple(out_s)
    self.in_avals = tuple(jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s)
                          for a, s in zip(in_avals, self.input_shardings))
    self.out_avals = tuple(jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s)
                           for a, s in zip(out_avals, self.output_shardings))
    self.num_inputs = len(in_avals)
    self.num_outputs = len(out_avals)
    self.donated_args = tuple(sorted(donated_args))
    self._executable = executable
    self._dispatch = make_dispatch(executable, self.num_inputs,
                                   self.num_outputs, self._check_args)

  def __call__(self, *args: jax.Array) -> list[jax.Array]:
    """Runs the fragment asynchronously on its devices.

    Args must be ``jax.Array``\\ s with the global shape/dtype of ``@main``'s
    parameters, placed on this fragment's devices with (shardings equivalent
    to) ``input_shardings``. Donated arguments are consumed (deleted).

    Raises:
      FragmentArgumentError (a ValueError): wrong arity, type, shape, dtype,
        devices or sharding, or an argument already deleted (e.g. donated to
        an earlier call) -- raised before anything executes or is donated.
      FragmentExecutionError: the runtime refused to dispatch for another
        reason (e.g. a tracer argument). Errors raised while the program runs
        asynchronously surface when its results are consumed.
    """
    if len(args) != self.num_inputs:
      raise FragmentArgumentError(
          f"fragment {self.name!r}: expected {self.num_inputs} arguments, got "
          f"{len(args)}")
    # jaxlib 0.10.2 (CPU, >1 device) crashes the process when executing with
    # an already-donated buffer, so deleted inputs are rejected up front.
    try:
      deleted = any(map(_IS_DELETED, args))
    except AttributeError:  # not a jax.Array: the validating path reports it
      deleted = False
    if deleted:
      self._check_args(args)
    try:
      return self._dispatch(*args)
    except FragmentArgumentError:
      raise
    except Exception as e:  # noqa: BLE001 -- re-raised with the fragment name
      raise FragmentExecutionError(
          f"fragment {self.name!r} ({describe_devices(self.mesh)}) failed to "
          f"dispatch: {type(e).__name__}: {e}") from e

  def call_trusted(self, args: list) -> list[jax.Array]:
    """Dispatches like `__call__` without its per-call checks (arity, deleted
    arguments): for the runtime, whose operands are placed and alive by
    construction (arguments are validated once per call of the program)."""
    return self._dispatch(*args)

  def _check_args(self, args: tuple) -> None:
    """Validates the arguments of a call that missed the C++ fast path.

    Only runs for argument signatures not seen before, so it costs nothing in
    the steady state.
    """
    name = self.name
    for i, (x, aval, s) in enumerate(zip(args, self.in_avals,
                                         self.input_shardings)):
      where = f"fragment {name!r}, argument {i}"
      if isinstance(x, jax.core.Tracer) or not isinstance(x, jax.Array):
        raise FragmentArgumentError(
            f"{where}: expected a concrete jax.Array of "
            f"{aval.dtype}{list(aval.shape)}, got {type(x).__name__}")
      if x.shape != aval.shape or x.dtype != aval.dtype:
        raise FragmentArgumentError(
            f"{where}: expected {aval.dtype}{list(aval.shape)}, got "
            f"{x.dtype}{list(x.shape)}")
      if x.is_deleted():
        raise FragmentArgumentError(
            f"{where}: the array has been deleted (donated to an earlier "
            "call?)")
      xs = x.sharding
      if xs.device_set != s.device_set:
        raise FragmentArgumentError(
            f"{where}: expected an array on devices "
            f"{sorted(device_ids(s.device_set))}, got one on devices "
            f"{sorted(device_ids(xs.device_set))}")
      if not xs.is_equivalent_to(s, len(aval.shape)):
        raise FragmentArgumentError(
            f"{where}: expected sharding {s}, got {xs}")

  def on_mesh(self, mesh: Mesh) -> "FragmentExecutable":
    """This program loaded on the devices of another mesh of the same shape,
    without compiling it again (its shardings move to that mesh)."""
    if dict(mesh.shape) != dict(self.mesh.shape):
      raise ValueError(f"fragment {self.name!r}: cannot move a program of mesh "
                       f"{dict(self.mesh.shape)} to a mesh of shape {dict(mesh.shape)}")
    return FragmentExecutable(self.name, mesh, load_on_mesh(self._executable, mesh),
                              self.in_avals, self.out_avals, self.donated_args)

  def as_text(self) -> str | None:
    """The compiled (optimized, partitioned) HLO, for debugging."""
    return executable_text(self._executable)

  def cost_analysis(self):
    """XLA's cost estimates of the compiled program (a dict such as
    ``{"flops": ..., "bytes accessed": ...}``), or None."""
    return executable_cost_analysis(self._executable)

  def memory_analysis(self):
    """XLA's per-device memory statistics of the compiled program (argument,
    output, temp sizes in bytes), or None where the backend has none."""
    return executable_memory_analysis(self._executable)

  def __repr__(self) -> str:
    return (f"FragmentExecutable({self.name!r}, {describe_devices(self.mesh)}"
            f", {self.num_inputs} -> {self.num_outputs})")


def compile_laid_out(layout: FragmentLayout,
                     callbacks: HostCallbacks | None = None) -> FragmentExecutable:
  """Compiles a fragment program as the partition stage laid it out
  (`mpmd.partition.layouts.FragmentLayout`: its text annotated, every
  argument and result sharding decided) on the devices of its mesh.

  Raises:
    FragmentCompileError: XLA rejects the program (the message names the
      fragment and contains XLA's text).
  """
  where = f"fragment {layout.name!r} ({describe_devices(layout.mesh)})"
  try:
    module = parse_fragment_module(layout.module_text)
    executable = compile_module(layout.name, module, layout.mesh, layout.in_avals,
                                layout.out_avals, layout.in_shardings, layout.out_shardings,
                                callbacks)
  except Exception as e:  # noqa: BLE001 -- re-raised with the fragment name
    raise FragmentCompileError(
        f"{where}: compilation failed: {type(e).__name__}: {e}") from e
  return FragmentExecutable(layout.name, layout.mesh, executable, layout.in_avals,
                            layout.out_avals, layout.donated_args)


def compile_fragment(mlir_text: str, mesh: Mesh, *, name: str,
                     in_shardings: Sequence[Sharding] | None = None,
                     donated_args: Sequence[int] = (),
                     out_shardings: Sequence[Sharding | None] | None = None,
                     callbacks: HostCallbacks | None = None,
                     accumulated: Mapping[int, int] | None = None
                     ) -> FragmentExecutable:
  """Lays out (`mpmd.partition.layouts.lay_out_fragment`) and compiles one
  fragment program on exactly ``mesh.devices``.

  Args:
    mlir_text, mesh, name, in_shardings, donated_args, out_shardings,
    accumulated: as `lay_out_fragment` takes them (a StableHLO module with a
      public ``@main`` over global tensor types; the mesh; default replicated
      inputs; the donated arguments, deleted by each call; per result the
      sharding it must have, None for the one Shardy's propagation gives it,
      which is what XLA would choose).
    callbacks: the host callbacks the module's callback custom calls refer
      to by position (those of the step it was cut from); default none.

  Returns:
    A :class:`FragmentExecutable`.

  Raises:
    FragmentCompileError: the text does not parse or XLA rejects the program
      (the message names the fragment and contains the parser's/XLA's text).
    ValueError: inconsistent arguments (shardings count/devices, donation
      indices).
  """
  return compile_laid_out(
      lay_out_fragment(mlir_text, mesh, name=name, in_shardings=in_shardings,
                       donated_args=donated_args, out_shardings=out_shardings,
                       accumulated=accumulated),
      callbacks)


def transfer(x: jax.Array, sharding: Sharding, *,
             donate: bool = False) -> jax.Array:
  """Moves ``x`` to ``sharding`` (e.g. onto another mesh of this process).

  Asynchronous (``jax.device_put``); with ``donate=True`` the source buffer may
  be freed once the copy is done.
  """
  if not isinstance(x, jax.Array):
    raise TypeError(f"transfer expects a jax.Array, got {type(x).__name__}")
  return jax.device_put(x, sharding, donate=donate)
