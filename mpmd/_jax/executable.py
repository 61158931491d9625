"""Fragment programs: parse, annotate, compile and dispatch (and the
coordination service of multi-process runs).

Written against jax/jaxlib 0.10.2; the JAX internals the runtime
(:mod:`mpmd.runtime.fragment`, :mod:`mpmd.distributed`) relies on:

* ``jax._src.interpreters.mlir.make_ir_context`` -- an MLIR context with the
  dialects JAX's compiler path understands (func, stablehlo, chlo, sdy, mpmd).
* ``jax._src.interpreters.mlir.dtype_to_ir_type`` -- dtype <-> MLIR element type.
* (public) ``jax.extend.mlir.ir`` / ``passmanager`` -- jaxlib's MLIR bindings;
  the ``sdy-lift-inlined-meshes`` pass, as jax's own lowering runs it.
* ``jax._src.config.use_shardy_partitioner`` -- which sharding annotation kind
  (``sdy.sharding`` or ``mhlo.sharding``) the compiler expects.
* ``Sharding._to_sdy_sharding`` / ``Sharding._to_xla_hlo_sharding`` -- the
  annotation for an input sharding, exactly as ``jax.jit`` writes it.
* ``jax._src.interpreters.pxla.UnloadedMeshExecutable.from_hlo`` -- compile an
  ``ir.Module`` on a device list through ``compiler.compile_or_get_cached``
  (persistent compilation cache included), read input/output shardings and
  layouts back from the executable, and build a ``pxla.MeshExecutable``.
* ``jax._src.compilation_cache.is_cache_used`` and
  ``jax._src.config.compilation_cache_dir`` -- whether (and where) the
  persistent compilation cache serves this process; with it, a compiled
  program's ``xla_executable.hlo_modules()`` / ``get_parameter_layouts()`` /
  ``get_output_layouts()`` tell whether the cache returned this module's.
* ``jax._src.interpreters.pxla.MeshExecutable.create_cpp_call`` and
  ``jax._src.stages.CompiledCallParams`` / ``stages.Compiled.call`` -- the C++
  dispatch fast path that ``jax.jit(...).lower(...).compile()`` objects use.
* ``MeshExecutable._in_shardings`` / ``._out_shardings`` (the latter as read
  back from XLA by ``from_hlo``), ``.as_text()``, ``.memory_analysis()``.
* ``Sharding._device_assignment`` -- the device order a sharding refers to.
* ``jax._src.named_sharding.UNSPECIFIED`` -- "let XLA choose" for outputs.
* ``jax._src.lib.xla_client.DeviceList`` -- the device list type ``from_hlo``
  takes.
* ``jax._src.tree_util.tree_structure`` -- pytree definitions for the call
  parameters (with the registry ``stages.Compiled.call`` compares against).
* ``jax._src.distributed.global_state.client`` -- the key-value store of JAX's
  coordination service (compile-time metadata between processes).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
import threading
from collections.abc import Callable, Collection, Sequence
from typing import Any

import jax
import jax.extend.backend
import numpy as np
from jax.extend.mlir import passmanager as _passmanager
from jax._src import array as _array
from jax._src import compilation_cache as _compilation_cache
from jax._src import compiler as _compiler
from jax._src import config as _config
from jax._src import distributed as _distributed
from jax._src import stages as _stages
from jax._src import tree_util as _tree_util
from jax._src.interpreters import mlir
from jax._src.interpreters import pxla as _pxla
from jax._src.lib import xla_client as _xc
from jax._src.lib.mlir import ir
from jax._src.named_sharding import UNSPECIFIED as _UNSPECIFIED
from jax._src.sharding_impls import GSPMDSharding as _GSPMDSharding

from mpmd._jax import unreduced as _unreduced

_logger = logging.getLogger("mpmd")
_JaxRuntimeError = jax.errors.JaxRuntimeError

__all__ = [
    "ArrayCopier",
    "aliased_results",
    "annotate_module",
    "batched_copier",
    "aval_of_tensor_type",
    "HostCallbacks",
    "compile_module",
    "host_callbacks",
    "device_assignment",
    "distributed_client",
    "executable_memory_analysis",
    "executable_shardings",
    "executable_text",
    "main_signature",
    "make_dispatch",
    "parse_fragment_module",
    "start_transfer_server",
]

# Argument attributes that carry a sharding or a donation mark; annotate_module
# owns them (the caller's in_shardings / donated_args are the source of truth).
_SHARDING_ATTRS = ("sdy.sharding", "mhlo.sharding")
_DONATION_ATTRS = ("jax.buffer_donor", "tf.aliasing_output")


def parse_fragment_module(text: str) -> Any:
  """Parses MLIR module text (pretty or generic form, with or without
  ``loc(...)`` debug info) into an ``ir.Module`` in a JAX MLIR context.

  Unregistered dialects are allowed so that foreign attributes survive parsing;
  unregistered (and ``mpmd.*``) operations are rejected. Raises ``ValueError``
  with MLIR's diagnostics (message and location) on failure.
  """
  ctx = mlir.make_ir_context()
  ctx.allow_unregistered_dialects = True
  with ctx:
    try:
      module = ir.Module.parse(text)
    except ir.MLIRError as e:
      raise ValueError(str(e)) from e
    # XLA cannot compile unregistered ops (and jaxlib 0.10.2 crashes on them),
    # so they are rejected here with their locations.
    unknown = []

    def visit(op):
      if (not ctx.is_registered_operation(op.name) or
          op.name.startswith("mpmd.")):
        unknown.append(f"  '{op.name}' at {op.location}")
      return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if unknown:
      raise ValueError("module contains operations XLA cannot compile "
                       "(unregistered dialect, or mpmd):\n" +
                       "\n".join(unknown[:10]))
  return module


def _find_main(module: Any) -> Any:
  """Returns the ``func.func @main`` operation of ``module``."""
  for op in module.body.operations:
    op = op.operation
    if op.name != "func.func":
      continue
    if ir.StringAttr(op.attributes["sym_name"]).value == "main":
      return op
  raise ValueError("module has no `func.func @main`")


@functools.lru_cache(maxsize=None)
def _element_types() -> dict[str, np.dtype]:
  """MLIR element type name -> dtype, built once. (Built whole before it is
  returned: compile threads parse modules at once, and a table filled in
  place was seen half-built by another thread: "unsupported element type
  i1".)"""
  names = ["int2", "uint2", "int4", "uint4", "float4_e2m1fn", "float6_e2m3fn",
           "float6_e3m2fn", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz",
           "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
           "float8_e8m0fnu", "bfloat16"]
  candidates = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                np.uint32, np.uint64, np.float16, np.float32, np.float64,
                np.complex64, np.complex128]
  candidates += [getattr(jax.numpy, n) for n in names if hasattr(jax.numpy, n)]
  candidates.append(np.bool_)  # last: i1 means bool
  table: dict[str, np.dtype] = {}
  with ir.Context():
    for c in candidates:
      try:
        t = mlir.dtype_to_ir_type(np.dtype(c))
      except TypeError:
        continue
      table[str(t)] = np.dtype(c)
  return table


def _element_dtype(ir_type: Any) -> np.dtype:
  """Maps an MLIR element type (e.g. ``f32``, ``bf16``, ``ui8``) to a dtype."""
  key = str(ir_type)
  table = _element_types()
  if key not in table:
    raise ValueError(f"unsupported element type {key}")
  return table[key]


def _tensor_aval(t: Any, what: str) -> jax.core.ShapedArray:
  """ShapedArray for a static ranked tensor type; ValueError otherwise."""
  if not isinstance(t, ir.RankedTensorType):
    raise ValueError(f"{what} has type {t}; only ranked tensors are supported")
  rt = t
  if not rt.has_static_shape:
    raise ValueError(f"{what} has dynamic type {t}; only static shapes are "
                     "supported")
  return jax.core.ShapedArray(tuple(rt.shape), _element_dtype(rt.element_type))


@functools.lru_cache(maxsize=4096)
def aval_of_tensor_type(text: str) -> jax.core.ShapedArray:
  """ShapedArray of a tensor type printed by MLIR (e.g. ``tensor<4x8xbf16>``).

  Memoized: a program's transfers repeat a few types many times, and each
  parse needs an MLIR context (about 1.5 ms to make)."""
  with mlir.make_ir_context():
    return _tensor_aval(ir.Type.parse(text), f"type {text}")


def main_signature(module: Any) -> tuple[list[jax.core.ShapedArray],
                                         list[jax.core.ShapedArray]]:
  """Global input and output avals of ``@main`` (from its function type)."""
  main = _find_main(module)
  with module.context:
    ft = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
    ins = [_tensor_aval(t, f"@main argument {i}")
           for i, t in enumerate(ft.inputs)]
    outs = [_tensor_aval(t, f"@main result {i}")
            for i, t in enumerate(ft.results)]
  return ins, outs


def aliased_results(module: Any) -> dict[int, int]:
  """``@main`` argument -> the result it names with ``tf.aliasing_output``
  (the result that reuses its buffer when it is donated)."""
  main = _find_main(module)
  if "arg_attrs" not in main.attributes:
    return {}
  out = {}
  with module.context:
    for i, attrs in enumerate(ir.ArrayAttr(main.attributes["arg_attrs"])):
      for named in ir.DictAttr(attrs):
        if named.name == "tf.aliasing_output":
          out[i] = ir.IntegerAttr(named.attr).value
  return out


def _sharding_attr(s: jax.sharding.Sharding, ndim: int, use_shardy: bool) -> tuple[str, Any]:
  """The (name, attribute) JAX writes to annotate a value with sharding ``s``."""
  if use_shardy:
    return "sdy.sharding", s._to_sdy_sharding(ndim).build({})
  return "mhlo.sharding", ir.StringAttr.get(str(s._to_xla_hlo_sharding(ndim)))


def annotate_module(module: Any, *, name: str,
                    in_shardings: Sequence[jax.sharding.Sharding],
                    in_avals: Sequence[jax.core.ShapedArray],
                    donated: Sequence[bool], num_devices: int,
                    out_shardings: Sequence[jax.sharding.Sharding | None] = (),
                    out_avals: Sequence[jax.core.ShapedArray] = (),
                    unaliased: Collection[int] = ()) -> None:
  """Prepares ``module`` in place for compilation on ``num_devices`` devices.

  * ``@main``'s arguments get the sharding annotation JAX itself would write
    for ``in_shardings`` (``sdy.sharding`` with an ``sdy.mesh`` under Shardy,
    else ``mhlo.sharding``), replacing any annotation already there;
  * donated arguments get ``jax.buffer_donor`` unless they already name the
    result whose buffer they become (``tf.aliasing_output``, kept, except for
    the arguments in ``unaliased``); donation marks on the other arguments
    are removed (``donated`` is the source of truth);
  * ``mhlo.num_partitions`` / ``mhlo.num_replicas`` are set to match;
  * an unnamed module is named ``name``.
  * results with a sharding in ``out_shardings`` get its annotation (the
    others are left alone: XLA chooses their sharding).
  """
  main = _find_main(module)
  use_shardy = _config.use_shardy_partitioner.value
  with module.context, ir.Location.unknown():
    old = (ir.ArrayAttr(main.attributes["arg_attrs"])
           if "arg_attrs" in main.attributes else None)
    new_attrs = []
    for i, (s, aval, d) in enumerate(zip(in_shardings, in_avals, donated)):
      attrs = {}
      if old is not None:
        for named in ir.DictAttr(old[i]):
          if named.name not in _SHARDING_ATTRS + _DONATION_ATTRS or (
              d and named.name == "tf.aliasing_output" and i not in unaliased):
            attrs[named.name] = named.attr
      key, value = _sharding_attr(s, aval.ndim, use_shardy)
      attrs[key] = value
      if d and "tf.aliasing_output" not in attrs:  # else it names the result it becomes
        attrs["jax.buffer_donor"] = ir.BoolAttr.get(True)
      new_attrs.append(ir.DictAttr.get(attrs))
    main.attributes["arg_attrs"] = ir.ArrayAttr.get(new_attrs)
    if any(o is not None for o in out_shardings):
      old_res = (ir.ArrayAttr(main.attributes["res_attrs"])
                 if "res_attrs" in main.attributes else None)
      new_res = []
      for i, (o, aval) in enumerate(zip(out_shardings, out_avals)):
        attrs = {named.name: named.attr for named in ir.DictAttr(old_res[i])} if old_res else {}
        if o is not None:
          for k in _SHARDING_ATTRS:
            attrs.pop(k, None)
          key, value = _sharding_attr(o, aval.ndim, use_shardy)
          attrs[key] = value
        new_res.append(ir.DictAttr.get(attrs))
      main.attributes["res_attrs"] = ir.ArrayAttr.get(new_res)
    mod_attrs = module.operation.attributes
    i32 = ir.IntegerType.get_signless(32)
    mod_attrs["mhlo.num_partitions"] = ir.IntegerAttr.get(i32, num_devices)
    mod_attrs["mhlo.num_replicas"] = ir.IntegerAttr.get(i32, 1)
    if "sym_name" not in mod_attrs:
      mod_attrs["sym_name"] = ir.StringAttr.get(name)
    if use_shardy:
      # The inline meshes of the shardings become `sdy.mesh` symbols, as in
      # jax's own lowering.
      _passmanager.PassManager.parse(
          "builtin.module(sdy-lift-inlined-meshes)").run(module.operation)


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
  (its HLO module name, its numbers of parameters and results, their ranks).
  A program from the cache that is not (an entry swapped, or stale), or that
  JAX cannot load back as this module's, is compiled again under another
  cache key, with a warning naming the cache directory and the fragment;
  where that fails too, the error says the cache is at fault and what to do.
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

  if not _compilation_cache.is_cache_used(backend):
    return build(module)
  module_name = ir.StringAttr(module.operation.attributes["sym_name"]).value

  def mismatch(exe: Any) -> str | None:
    return _program_mismatch(exe, module_name, in_avals, out_avals)

  first_error: Exception | None = None
  try:
    exe = _build_noting_cache_reads(build, module)
    problem = mismatch(exe)
  except _JaxRuntimeError:
    raise  # XLA rejected the program (a cache read that fails is JAX's to handle)
  except Exception as e:  # noqa: BLE001 -- a program JAX cannot load back as this one's
    first_error, problem = e, f"{type(e).__name__}: {e}"
  if problem is None:
    return exe
  # Compile again under another cache key: a copy of the module with one
  # more attribute (JAX's key hashes the module's bytecode; a new module
  # object also misses JAX's in-memory cache of compiled modules).
  with module.context:
    fresh = ir.Module.parse(module.operation.get_asm(enable_debug_info=True))
    fresh.operation.attributes[_CACHE_BYPASS_ATTR] = ir.StringAttr.get("recompiled")
  cache_dir = _config.compilation_cache_dir.value
  try:
    exe = _build_noting_cache_reads(build, fresh)
    again = mismatch(exe)
  except Exception as e:  # noqa: BLE001
    if first_error is not None and type(e) is type(first_error) and str(e) == str(first_error):
      # The same failure under another key: the program's, not the cache's.
      first_error.add_note("(the same when compiled again under another key of JAX's "
                           f"persistent compilation cache, {cache_dir})")
      raise first_error from None
    raise RuntimeError(_cache_fault(module_name, cache_dir, problem,
                                    f"compiling it again failed: {type(e).__name__}: {e}")) from e
  if again is not None:
    raise RuntimeError(_cache_fault(module_name, cache_dir, problem,
                                    f"under another key it returned another program again: "
                                    f"{again}"))
  _logger.warning(
      "JAX's persistent compilation cache (%s) returned another program for fragment %r "
      "(on devices %s): %s. Compiled it again, bypassing that entry. Delete the cache's "
      "entries named %s, or the whole directory: until then every run loads that entry "
      "and compiles again.", cache_dir, name, [d.id for d in devices], problem,
      _entries_named(module_name, cache_dir))
  return exe


#: `id`s of the XLA executables read from JAX's persistent cache (not
#: compiled by this process); see `load_on_mesh`.
_READ_FROM_CACHE: set[int] = set()
_cache_reads = threading.local()
_cache_listener_lock = threading.Lock()
_cache_listener_registered = False


def _note_cache_read(event: str, **_: Any) -> None:
  if event == "/jax/compilation_cache/cache_hits":
    _cache_reads.hit = True


def _build_noting_cache_reads(build: Callable[[Any], Any], module: Any) -> Any:
  """`build(module)`, noting (in `_READ_FROM_CACHE`) a program that JAX read
  from its persistent cache: JAX reports each read as a monitoring event,
  in the compiling thread."""
  global _cache_listener_registered
  with _cache_listener_lock:
    if not _cache_listener_registered:
      jax.monitoring.register_event_listener(_note_cache_read)
      _cache_listener_registered = True
  _cache_reads.hit = False
  exe = build(module)
  if _cache_reads.hit:
    _READ_FROM_CACHE.add(id(exe.xla_executable))
  return exe


#: Module attribute that gives a recompiled module another persistent cache key.
_CACHE_BYPASS_ATTR = "mpmd.persistent_cache_bypass"


def _entries_named(module_name: str, cache_dir: str | None) -> str:
  """The cache entries JAX writes for `module_name`: the pattern, and the
  file names where the cache is a local directory."""
  pattern = f"'{module_name}-*-cache'"
  if cache_dir and os.path.isdir(cache_dir):
    names = sorted(f for f in os.listdir(cache_dir)
                   if f.startswith(module_name + "-") and f.endswith("-cache"))
    if names:
      return f"{pattern} ({', '.join(names[:4])}{', ...' if len(names) > 4 else ''})"
  return pattern


def _cache_fault(module_name: str, cache_dir: str | None, problem: str, then: str) -> str:
  return (f"JAX's persistent compilation cache ({cache_dir}) is at fault: for module "
          f"{module_name!r} it returned another program ({problem}); {then}. Delete the "
          f"cache's entries named {_entries_named(module_name, cache_dir)}, or the whole "
          "directory, or turn the cache off (jax.config.update("
          "'jax_enable_compilation_cache', False)), and run again")


def _program_mismatch(exe: Any, module_name: str,
                      in_avals: Sequence[jax.core.ShapedArray],
                      out_avals: Sequence[jax.core.ShapedArray]) -> str | None:
  """What shows that compiled `exe` is not the program of module
  `module_name` with these avals (its HLO module name, its numbers of
  parameters and results and their ranks), or None."""
  xla = exe.xla_executable
  modules = xla.hlo_modules()
  if modules and modules[0].name != module_name and _PLAIN_NAME.fullmatch(module_name):
    return f"its HLO module is {modules[0].name!r}"
  for what, layouts, avals in (("parameters", xla.get_parameter_layouts(), in_avals),
                               ("results", xla.get_output_layouts(), out_avals)):
    if len(layouts) != len(avals):
      return f"it has {len(layouts)} {what}, not {len(avals)}"
    ranks = [_layout_rank(l) for l in layouts]
    if None not in ranks and ranks != [a.ndim for a in avals]:
      return f"its {what} have ranks {ranks}, not {[a.ndim for a in avals]}"
  return None


def _layout_rank(layout: Any) -> int | None:
  """The rank of an array with this compiled layout (None: not known)."""
  try:
    return len(layout._xla_layout().minor_to_major())
  except (AttributeError, TypeError):
    return None


#: Module names XLA keeps as they are (others may be rewritten).
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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
  if id(unloaded.xla_executable) in _READ_FROM_CACHE:
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


def make_array_copier(source: jax.sharding.Sharding, target: jax.sharding.Sharding,
                      ndim: int) -> Callable[[jax.Array], jax.Array] | None:
  """A copy of arrays laid out as `source` into `target` (another mesh's
  devices, the same layout) as one call of the C++ copy that
  `jax.device_put` ends in for that case, without its Python bookkeeping.
  None when the layouts differ or a side is not fully addressable (then
  `jax.device_put` it is)."""
  try:
    if not (source.is_fully_addressable and target.is_fully_addressable and
            _array._sharding_indices_and_eq(source, target, ndim)):
      return None
  except (NotImplementedError, AttributeError, TypeError):
    return None
  return ArrayCopier(target._internal_device_list.addressable_device_list, target)


class ArrayCopier:
  """One same-layout copy into `target` (see `make_array_copier`); several
  go out as one call with `batched_copier`."""

  __slots__ = ("devices", "target")

  def __init__(self, devices: Any, target: jax.sharding.Sharding):
    self.devices = devices
    self.target = target

  def __call__(self, x: jax.Array) -> jax.Array:
    return _xc.batched_copy_array_to_devices_with_sharding(
        [x], [self.devices], [self.target], [_xc.ArrayCopySemantics.REUSE_INPUT])[0]


def batched_copier(copiers: Sequence[ArrayCopier]) -> Callable[[list], list]:
  """One call of the C++ batched copy for all of `copiers` (a list of
  arrays in, the copies out, in order)."""
  devices = [c.devices for c in copiers]
  targets = [c.target for c in copiers]
  semantics = [_xc.ArrayCopySemantics.REUSE_INPUT] * len(copiers)
  copy = _xc.batched_copy_array_to_devices_with_sharding

  def copy_all(xs: list) -> list:
    return copy(xs, devices, targets, semantics)

  return copy_all


def device_assignment(sharding: jax.sharding.Sharding) -> tuple:
  """The ordered devices a sharding's tile assignment refers to (its
  ``_device_assignment``); must equal the compile device list for the
  sharding annotation to mean what it says."""
  return tuple(sharding._device_assignment)


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


class _CheckedExecutable:
  """Stands in for the MeshExecutable in the slow (cache-miss) call path:
  validates the arguments, then delegates to the real executable."""

  __slots__ = ("_exe", "_check")

  def __init__(self, exe: Any, check: Callable[[tuple], None]):
    self._exe = exe
    self._check = check

  def call(self, *args):
    self._check(args)
    return self._exe.call(*args)


def make_dispatch(exe: Any, num_args: int, num_outs: int,
                  check: Callable[[tuple], None]) -> Callable[..., list]:
  """A callable ``f(*arrays) -> list[jax.Array]`` that runs ``exe``.

  It is the C++ dispatch path of ``jax.stages.Compiled`` (a ``PjitFunction``):
  calls whose argument signature (shape, dtype, sharding, committedness) was
  seen before never enter Python; any other call takes the Python slow path,
  where ``check(args)`` runs first (raise there to reject the call before
  anything executes).
  """
  in_tree = _tree_util.tree_structure((tuple(range(num_args)), {}))
  out_tree = _tree_util.tree_structure(list(range(num_outs)))
  params = _stages.CompiledCallParams(
      _CheckedExecutable(exe, check), True, in_tree, out_tree, [], None, None)
  fn = exe.create_cpp_call(params)
  if fn is None:  # executables with effects/callbacks have no C++ path
    def fn(*args):
      return _stages.Compiled.call(params, *args)[0]
  return fn


# ----------------------------------------------------------------------------
# Multi-process runs: the coordination service's key-value store, and JAX's
# transfer server (point-to-point pulls between processes).


def start_transfer_server(client: Any, address: str) -> Any:
  """A `jax.experimental.transfer` server of `client` listening on
  `address` ("host:0": any port), its data connections on the same host."""
  from jax.experimental import transfer  # noqa: PLC0415 (experimental API)
  host = address.rsplit(":", 1)[0]
  return transfer.start_transfer_server(client, address, [f"{host}:0"])



def distributed_client() -> Any | None:
  """The client of JAX's coordination service (set by
  ``jax.distributed.initialize``), or None in a single-process run. Its
  ``key_value_set(key, value, allow_overwrite)``, ``key_value_try_get(key)``
  (raises when the key is absent) and ``blocking_key_value_get(key, ms)``
  are what mpmd uses to exchange compile-time metadata between processes."""
  return _distributed.global_state.client


def drop_failed_effect_tokens() -> int:
  """Forgets the effect tokens of executions that failed (JAX keeps the
  latest one per device for `jax.effects_barrier`; one of a failed step
  would make every later barrier, and the one at exit, raise the old error
  again). Waits for each token: call it only where the work it tracks
  cannot wait on another process. Returns how many were dropped."""
  from jax._src import dispatch  # pylint: disable=import-outside-toplevel
  tokens = dispatch.runtime_tokens.output_runtime_tokens
  dropped = 0
  for device, token in list(tokens.items()):
    try:
      token.block_until_ready()
    except Exception:  # noqa: BLE001 -- the failure was reported where it began
      if tokens.get(device) is token:
        del tokens[device]
        dropped += 1
  return dropped
