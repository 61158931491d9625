"""Compiling a fragment program on a mesh, loading it on another mesh of the
same shape, and what a compiled program says about itself.

The JAX internals used here:

* ``jax._src.interpreters.pxla.UnloadedMeshExecutable.from_hlo`` -- compile an
  ``ir.Module`` on a device list through ``compiler.compile_or_get_cached``
  (persistent compilation cache included, checked by
  :mod:`mpmd._jax.persistent_cache`), read input/output shardings and layouts
  back from the executable, and build a ``pxla.MeshExecutable``.
* ``jax._src.compiler.get_compile_options`` and the backend's
  ``serialize_executable`` / ``deserialize_executable`` -- a program loaded on
  other devices without compiling again.
* ``MeshExecutable._in_shardings`` / ``._out_shardings`` (the latter as read
  back from XLA by ``from_hlo``), ``.as_text()``, ``.cost_analysis()``,
  ``.memory_analysis()``, ``._unloaded_executable``.
* ``Lowered._lowering.compile_args`` -- the host callbacks of a lowered step.
* ``jax._src.named_sharding.UNSPECIFIED`` -- "let XLA choose" for outputs.
* ``jax._src.lib.xla_client.DeviceList`` -- the device list type ``from_hlo``
  takes.
* ``jax._src.sharding_impls.GSPMDSharding`` -- moved to another mesh as is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.extend.backend
import numpy as np
from jax._src import compiler as _compiler
from jax._src.interpreters import pxla as _pxla
from jax._src.lib import xla_client as _xc
from jax._src.named_sharding import UNSPECIFIED as _UNSPECIFIED
from jax._src.sharding_impls import GSPMDSharding as _GSPMDSharding

from mpmd._jax import persistent_cache as _persistent_cache
from mpmd._jax import unreduced as _unreduced

__all__ = [
    "HostCallbacks",
    "compile_module",
    "executable_cost_analysis",
    "executable_memory_analysis",
    "executable_shardings",
    "executable_text",
    "host_callbacks",
    "load_on_mesh",
]


@dataclasses.dataclass(frozen=True)
class HostCallbacks:
  """The host callbacks of a lowered step, in the order its callback custom
  calls refer to them (``mhlo.backend_config = {index = i}``), with what JAX
  keeps alive for them and the step's unordered effects."""
  callbacks: tuple[Any, ...] = ()
  keepalive: Any = None
  unordered_effects: tuple[Any, ...] = ()

  def __bool__(self) -> bool:
    return bool(self.callbacks)


def host_callbacks(lowered: jax.stages.Lowered) -> HostCallbacks:
  """The `HostCallbacks` of a ``jax.stages.Lowered`` (none if it has none)."""
  args = lowered._lowering.compile_args  # pylint: disable=protected-access
  return HostCallbacks(tuple(args.get("host_callbacks") or ()), args.get("keepalive"),
                       tuple(args.get("unordered_effects") or ()))


def compile_module(name: str, module: Any, mesh: jax.sharding.Mesh,
                   in_avals: Sequence[jax.core.ShapedArray],
                   out_avals: Sequence[jax.core.ShapedArray],
                   in_shardings: Sequence[jax.sharding.Sharding],
                   out_shardings: Sequence[jax.sharding.Sharding | None] = (),
                   callbacks: "HostCallbacks | None" = None) -> Any:
  """Compiles an annotated module SPMD-partitioned over ``mesh.devices``.

  ``callbacks``: the host callbacks (``jax.debug.print``, ``pure_callback``,
  ...) of the step the module was cut from, which its callback custom calls
  name by position; none by default.

  Goes through ``pxla.UnloadedMeshExecutable.from_hlo`` (as ``jax.jit`` does),
  hence through ``compiler.compile_or_get_cached`` and the persistent
  compilation cache when enabled. Output shardings are left to XLA and read
  back, except those given in ``out_shardings`` (None: XLA's choice).
  Returns a ``pxla.MeshExecutable``; XLA errors propagate unchanged.

  With the persistent cache on, the program is checked to be this module's
  (:func:`mpmd._jax.persistent_cache.build_checked`).
  """
  devices = tuple(mesh.devices.flat)
  backend = jax.extend.backend.get_backend(devices[0].platform)
  n_in, n_out = len(in_avals), len(out_avals)
  outs = tuple(_UNSPECIFIED if o is None else o
               for o in (tuple(out_shardings) or (None,) * n_out))

  def build(m: Any) -> Any:
    return _pxla.UnloadedMeshExecutable.from_hlo(
        name, m, list(in_avals), list(out_avals), tuple(in_shardings),
        outs,
        tuple_args=False,
        unordered_effects=list(callbacks.unordered_effects) if callbacks else [],
        ordered_effects=[],
        host_callbacks=list(callbacks.callbacks) if callbacks else [],
        keepalive=callbacks.keepalive if callbacks else None, kept_var_idx=set(range(n_in)),
        backend=backend, device_list=_xc.DeviceList(devices), committed=True,
        in_layouts=(None,) * n_in, out_layouts=(None,) * n_out,
        compiler_options_kvs=(), num_devices=len(devices), context_mesh=mesh)

  return _persistent_cache.build_checked(build, module, name, backend, devices, in_avals,
                                         out_avals)


def _on_devices(sharding: jax.sharding.Sharding, mesh: jax.sharding.Mesh) -> jax.sharding.Sharding:
  """The same layout as `sharding` (of a mesh of the same shape) on `mesh`'s
  devices, in the same positions."""
  if isinstance(sharding, jax.sharding.NamedSharding):
    if sharding.spec.unreduced:  # partial sums: on an Explicit mesh (`unreduced`)
      return _unreduced.on_mesh(sharding, mesh)
    return jax.sharding.NamedSharding(mesh, sharding.spec, memory_kind=sharding.memory_kind)
  if isinstance(sharding, jax.sharding.SingleDeviceSharding):
    return jax.sharding.SingleDeviceSharding(mesh.devices.flat[0],
                                             memory_kind=sharding.memory_kind)
  if isinstance(sharding, _GSPMDSharding):
    return _GSPMDSharding(tuple(mesh.devices.flat), sharding._hlo_sharding,
                          memory_kind=sharding.memory_kind)
  raise TypeError(f"cannot move a {type(sharding).__name__} to another mesh")


def load_on_mesh(exe: Any, mesh: jax.sharding.Mesh) -> Any:
  """A ``pxla.MeshExecutable`` compiled for one mesh, loaded on the devices
  of another mesh of the same shape without compiling again.

  The XLA executable is serialized and deserialized with compile options
  whose device assignment is ``mesh``'s devices (as JAX's persistent cache
  does), and its input and output shardings are moved to ``mesh``.

  Raises ``ValueError`` for a program read from JAX's persistent cache:
  jaxlib 0.10.2 serializes such a (CPU) program without its generated code,
  and the copy fails when it runs (``NOT_FOUND: Function <fusion> not
  found``). Compile it for ``mesh`` instead (a cache read after the first
  run).
  """
  unloaded = exe._unloaded_executable
  if _persistent_cache.read_from_cache(exe):
    raise ValueError("the program was read from JAX's persistent compilation cache, and "
                     "jaxlib serializes such programs without their code: compile it for "
                     "this mesh instead")
  devices = tuple(mesh.devices.flat)
  if len(devices) != len(unloaded.device_list):
    raise ValueError(f"cannot load a program of {len(unloaded.device_list)} devices on "
                     f"{len(devices)} devices")
  backend = unloaded.backend
  options = _compiler.get_compile_options(
      num_replicas=1, num_partitions=len(devices),
      device_assignment=np.array([[d.id for d in devices]]), backend=backend)
  device_list = _xc.DeviceList(devices)
  loaded = backend.deserialize_executable(
      backend.serialize_executable(unloaded.xla_executable), device_list, options)
  moved = dataclasses.replace(
      unloaded, xla_executable=loaded, device_list=device_list,
      input_shardings=tuple(_on_devices(s, mesh) for s in unloaded.input_shardings),
      output_shardings=tuple(_on_devices(s, mesh) for s in unloaded.output_shardings))
  return moved.load()

def executable_shardings(exe: Any) -> tuple[list[jax.sharding.Sharding],
                                            list[jax.sharding.Sharding]]:
  """(input shardings, output shardings) of a ``pxla.MeshExecutable``; the
  output ones are those read back from the compiled XLA executable."""
  return list(exe._in_shardings), list(exe._out_shardings)


def executable_text(exe: Any) -> str | None:
  """The optimized HLO text of a ``pxla.MeshExecutable`` (for debugging)."""
  return exe.as_text()


def executable_cost_analysis(exe: Any) -> Any:
  """XLA's cost estimates of a ``pxla.MeshExecutable`` (e.g. ``flops``,
  ``bytes accessed``), or ``None`` where the backend has none."""
  try:
    return exe.cost_analysis()
  except NotImplementedError:
    return None


def executable_memory_analysis(exe: Any) -> Any:
  """XLA's compiled memory statistics of a ``pxla.MeshExecutable`` (per
  device: argument, output, temp and generated-code sizes), or ``None``."""
  try:
    return exe.memory_analysis()
  except NotImplementedError:
    return None
