"""`mpmd.run.calling.SteadyInputs`: the steady-state path takes a call's arguments
unchecked only when they have the compiled shapes, dtypes and shardings.

An argument of the right dtype and the wrong shape must take the checked path
(which raises a clear error); accepted, it would reach a fragment compiled for
another shape.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mpmd.run.calling import SteadyInputs


def _device_array(shape, dtype=jnp.float32) -> jax.Array:
  return jax.device_put(jnp.zeros(shape, dtype), jax.devices()[0])


def _inputs_for(x: jax.Array, **kw) -> SteadyInputs:
  """SteadyInputs for one program input, compiled for `x`, whose class a
  checked call has accepted."""
  steady = SteadyInputs(kept=[0], shardings=[x.sharding], donated=[False], avals=[x.aval], **kw)
  steady.array_types.add(type(x))
  return steady


def test_accepts_an_argument_as_compiled():
  x = _device_array((4, 8))
  assert _inputs_for(x).accept([x]) == [x]


def test_rejects_the_right_dtype_with_the_wrong_shape():
  x = _device_array((4, 8))
  wrong = _device_array((8, 4))
  assert wrong.dtype == x.dtype and wrong.sharding == x.sharding
  assert _inputs_for(x).accept([wrong]) is None


def test_rejects_a_wrong_shape_after_accepting_the_right_one():
  """The avals remembered from the last accepted call do not let a new
  shape through."""
  x = _device_array((4, 8))
  steady = _inputs_for(x)
  assert steady.accept([x]) == [x]
  assert steady.accept([_device_array((4, 9))]) is None
  assert steady.accept([x]) == [x]


def test_rejects_the_wrong_dtype_with_the_right_shape():
  x = _device_array((4, 8))
  assert _inputs_for(x).accept([_device_array((4, 8), jnp.int32)]) is None


def test_rejects_an_unread_argument_of_another_shape():
  x = _device_array((4, 8))
  steady = _inputs_for(x, unused=[(1, (3,), jnp.dtype(jnp.float32))])
  assert steady.accept([x, _device_array((3,))]) == [x]
  assert steady.accept([x, _device_array((5,))]) is None
