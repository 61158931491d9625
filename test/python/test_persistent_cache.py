"""JAX's persistent compilation cache returning another program than the one
asked for (entries swapped): fragments are compiled again with a warning
naming the cache, or the error says the cache is at fault. Each run is a
fresh process (JAX reads the cache once per process and key) running
test/python/multiprocess/persistent_cache.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "test", "python", "multiprocess", "persistent_cache.py")
WARNING = "JAX's persistent compilation cache ({}) returned another program for fragment {!r}"


def _run(cache) -> subprocess.CompletedProcess:
  env = dict(os.environ)
  env.pop("XLA_FLAGS", None)  # the script asks for its devices
  return subprocess.run([sys.executable, SCRIPT, "--cache", str(cache)], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=240)


def _entries(cache, name: str) -> list[str]:
  return sorted(f for f in os.listdir(cache) if f.startswith(name + "-") and f.endswith("-cache"))


def _swap(cache, a: str, b: str) -> None:
  """Swaps the contents of the cache entries of modules `a` and `b`."""
  (pa,), (pb,) = _entries(cache, a), _entries(cache, b)
  pa, pb = os.path.join(cache, pa), os.path.join(cache, pb)
  os.replace(pa, pa + ".swap")
  os.replace(pb, pa)
  os.replace(pa + ".swap", pb)


ALL_OK = ["frag_add ok", "frag_mul ok", "frag_sum3 ok", "pipeline ok"]


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
  """A cache directory filled by one run (and left unchanged by a second:
  every entry is found and none is taken for another program)."""
  cache = tmp_path_factory.mktemp("filled") / "cache"
  for _ in range(2):
    proc = _run(cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == " ".join(ALL_OK).split(), proc.stdout + proc.stderr
    assert "persistent compilation cache" not in proc.stderr, proc.stderr
  assert _entries(cache, "p0_stage0_fwd.step") and _entries(cache, "frag_sum3"), os.listdir(cache)
  return cache


@pytest.fixture
def cache(filled, tmp_path):
  """The filled cache, restored after the test (the key of an entry depends
  on the cache's directory, so the test works on it in place)."""
  backup = tmp_path / "backup"
  shutil.copytree(filled, backup)
  yield filled
  shutil.rmtree(filled)
  shutil.copytree(backup, filled)


def test_programs_read_from_the_cache_run_on_every_mesh(cache):
  """A third run reads every program from the cache, the pipeline's update
  program included, which used to be loaded on the other mesh from the copy
  read from the cache (jaxlib serializes such a copy without its code: the
  loaded program failed with `NOT_FOUND: Function ... not found`); it is
  compiled (read from the cache) per mesh instead."""
  proc = _run(cache)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert proc.stdout.split() == " ".join(ALL_OK).split(), proc.stdout + proc.stderr
  assert "NOT_FOUND" not in proc.stderr and "returned another program" not in proc.stderr, (
      proc.stderr)


@pytest.mark.parametrize("a,b", [
    ("frag_add", "frag_mul"),            # the same signature: ran the wrong program
    ("frag_add", "frag_sum3"),           # not: failed with AssertionError: (3, 2)
    ("p0_stage0_fwd.step", "p2_stage0_bwd.step"),  # a pipeline's forward and backward
])
def test_swapped_entries_are_compiled_again_with_a_warning(cache, a, b):
  _swap(cache, a, b)
  proc = _run(cache)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert proc.stdout.split() == " ".join(ALL_OK).split(), proc.stdout + proc.stderr
  for name in (a, b):
    assert WARNING.format(cache, name) in proc.stderr, proc.stderr
    assert f"Delete the cache's entries named '{name}-*-cache'" in proc.stderr, proc.stderr
  assert proc.stderr.count("returned another program") == 2, proc.stderr
  # The next run does the same (the swapped entries are still there) and
  # finds the programs compiled again under their own key.
  again = _run(cache)
  assert again.returncode == 0 and again.stderr.count("returned another program") == 2, (
      again.stdout + again.stderr)


def test_a_cache_that_returns_another_program_under_both_keys_is_named(cache):
  names = ("frag_add", "frag_mul")
  first = {n: set(_entries(cache, n)) for n in names}
  _swap(cache, *names)
  assert _run(cache).returncode == 0
  # Each now has a second entry, compiled again under another key: swap
  # those too.
  pa, pb = (os.path.join(cache, *(set(_entries(cache, n)) - first[n])) for n in names)
  os.replace(pa, pa + ".swap")
  os.replace(pb, pa)
  os.replace(pa + ".swap", pb)
  proc = _run(cache)
  assert proc.returncode != 0, proc.stdout + proc.stderr
  assert "FragmentCompileError: fragment 'frag_add'" in proc.stderr, proc.stderr
  assert f"JAX's persistent compilation cache ({cache}) is at fault" in proc.stderr, proc.stderr
  assert "under another key it returned another program again" in proc.stderr, proc.stderr
  assert "jax_enable_compilation_cache" in proc.stderr, proc.stderr


def test_a_program_read_from_the_cache_is_known_by_identity_not_address():
  """What the cache served is remembered per program object, for as long as
  it lives: a program compiled later (which may get the address of a freed
  one) is not taken for a read from the cache. (An `id` once outlived its
  program: in a long process, programs compiled afresh were then compiled
  again for every mesh instead of loaded on it.)"""
  import gc  # noqa: PLC0415
  import weakref  # noqa: PLC0415

  import jax.monitoring  # noqa: PLC0415

  from mpmd._jax import persistent_cache as pc  # noqa: PLC0415

  class Program:  # (stands for a pxla.MeshExecutable)
    pass

  def served(module):
    del module
    jax.monitoring.record_event("/jax/compilation_cache/cache_hits")
    return Program()

  read = pc._build_noting_cache_reads(served, None)
  assert pc.read_from_cache(read)
  # Held weakly: the set drops it with its last reference. (Programs of
  # earlier tests in this process may be in the set too: held here, they stay.)
  others = [p for p in pc._READ_FROM_CACHE if p is not read]
  gone = weakref.ref(read)
  del read
  gc.collect()
  assert gone() is None and len(pc._READ_FROM_CACHE) == len(others)
  compiled = [pc._build_noting_cache_reads(lambda module: Program(), None) for _ in range(100)]
  assert not any(pc.read_from_cache(p) for p in compiled)
