"""Fragment programs as MLIR: parsing module text and reading its signature.

The JAX internals used here:

* ``jax._src.interpreters.mlir.make_ir_context`` -- an MLIR context with the
  dialects JAX's compiler path understands (func, stablehlo, chlo, sdy, mpmd).
* ``jax._src.interpreters.mlir.dtype_to_ir_type`` -- dtype <-> MLIR element type.
* ``jax._src.lib.mlir.ir`` -- jaxlib's MLIR bindings.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np
from jax._src.interpreters import mlir
from jax._src.lib.mlir import ir

__all__ = [
    "aliased_results",
    "aval_of_tensor_type",
    "find_main",
    "main_signature",
    "parse_fragment_module",
]


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


def find_main(module: Any) -> Any:
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
  main = find_main(module)
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
  main = find_main(module)
  if "arg_attrs" not in main.attributes:
    return {}
  out = {}
  with module.context:
    for i, attrs in enumerate(ir.ArrayAttr(main.attributes["arg_attrs"])):
      for named in ir.DictAttr(attrs):
        if named.name == "tf.aliasing_output":
          out[i] = ir.IntegerAttr(named.attr).value
  return out
