"""Helpers shared by the benchmark scripts.

* the machine a run happens on (`machine_description`),
* Markdown tables (`markdown_table`),
* `write_section`: replaces one lettered section of `benchmarks/RESULTS.md`
  (creating the file with all sections if it does not exist), so that every
  script can be rerun on its own without touching the others' figures,
* `TimedMpmdJit`: `mpmd.jit` that records what each C++ partitioner call costs,
* `mlp_problem`: the pipelined MLP the benchmarks compile.

Import this module only after setting XLA_FLAGS (the scripts do).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import pathlib
import platform
import re
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import mpmd
from mpmd import _mpmd
from mpmd.partition import partitioner as partition_module
from mpmd.jit import MpmdJitted

RESULTS = pathlib.Path(__file__).resolve().parent / "RESULTS.md"

#: Section key -> heading, in file order.
SECTIONS = {
    "a": "(a) Compile time",
    "b": "(b) Step time vs jax.jit",
    "c": "(c) Per-fragment dispatch cost",
    "d": "(d) C++ pass-pipeline time",
    "e": "(e) Bubble fraction: measured vs simulated",
    "f": "(f) Several processes: step time and transfers",
    "g": "(g) Compile time vs microbatches (JaxPP-style step)",
    "h": "(h) Pipeline speed-up: two processes pinned to their own cores",
    "i": "(i) Automatic planning: planned pipeline vs even split",
    "j": "(j) A GPT-2-sized model: step, compile and memory vs jax.jit",
    "k": "(k) Automatic stages: auto_stages' cut vs the planner's best labelled plan",
    "m": "(m) One issuing thread per mesh",
    "n": "(n) What a program call costs: the figures back-to-back units merge by",
}
#: Which script writes each section (the placeholder of a section not yet run).
WRITERS = {"a": "benchmarks/compile_time.py", "b": "benchmarks/runtime.py",
           "c": "benchmarks/runtime.py", "d": "benchmarks/pass_pipeline.py",
           "e": "benchmarks/runtime.py", "f": "benchmarks/multiprocess.py",
           "g": "benchmarks/compile_microbatches.py", "h": "benchmarks/pinned_pipeline.py",
           "i": "benchmarks/plan.py", "j": "benchmarks/gpt2.py",
           "k": "benchmarks/auto_stages.py", "m": "benchmarks/issue_threads.py",
           "n": "benchmarks/dispatch_cost.py"}

_HEADER = """# Benchmark results

Figures measured by the scripts in `benchmarks/`. Each section is written by one
script, which replaces only its own section, and states the command that produced
it, the date and the machine. Every comparison is taken side by side in one run
(ratios, not absolute numbers, are what carries over between machines).

Regenerate a section by running its command from the repository root, e.g.

```sh
python benchmarks/compile_time.py      # (a)
python benchmarks/pass_pipeline.py     # (d)
python benchmarks/runtime.py           # (b), (c), (e)
python benchmarks/multiprocess.py      # (f), launches 2 processes itself
python benchmarks/compile_microbatches.py  # (g), about 7 minutes (jax.jit of the unrolled loop)
python benchmarks/pinned_pipeline.py   # (h), 2 processes pinned to one core each
python benchmarks/plan.py              # (i), 2 pinned processes
python benchmarks/gpt2.py              # (j), GPT-2 124M, about 15 minutes
python benchmarks/auto_stages.py       # (k), 2 pinned processes, 3 runs
python benchmarks/gpu_smoke.py         # (l), on a GPU machine, with gpt2.py (see there)
```

Each script takes `--output PATH` (`runtime.py`: `--results PATH`) to write somewhere
else and `--help` for its sizes.

Machine of the first run: {machine}
"""


def _cpu_model() -> str:
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemTotal:"):
          return int(line.split()[1]) / 2**20
  except OSError:
    pass
  return None


def machine_description() -> str:
  """One line: CPU model, cores, memory, OS, Python, jax/jaxlib versions."""
  memory = _memory_gib()
  mem = f"{memory:.1f} GiB RAM" if memory is not None else "unknown RAM"
  import jaxlib  # pylint: disable=import-outside-toplevel
  return (f"{_cpu_model()}, {os.cpu_count()} cores, {mem}, {platform.system()} "
          f"{platform.release()}, Python {platform.python_version()}, jax {jax.__version__}, "
          f"jaxlib {jaxlib.__version__}, {jax.device_count()} {jax.default_backend()} devices"
          + ("" if jax.default_backend() == "cpu" else f" ({jax.devices()[0].device_kind})"))


def command_line(script_file: str, argv: Sequence[str] | None) -> str:
  """The command that reproduces a run of `script_file` with `argv` (None: sys.argv)."""
  script = pathlib.Path(script_file).resolve()
  try:
    script_text = str(script.relative_to(RESULTS.parent.parent))
  except ValueError:
    script_text = str(script)
  args = sys.argv[1:] if argv is None else list(argv)
  return shlex.join(["python", script_text, *args])


def provenance(command: str) -> str:
  """The lines every section starts with: command, date, machine."""
  date = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
  load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
  return (f"Command: `{command}`  \nDate: {date}  \nMachine: {machine_description()}  \n"
          f"Load average (1, 5, 15 min) when the run ended: {load} (the machine is shared: "
          "a load above its core count means other work ran alongside)\n")


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
  """A Markdown table; numbers are right-aligned."""
  def cell(x: Any) -> str:
    return x if isinstance(x, str) else f"{x}"
  cells = [[cell(x) for x in row] for row in rows]
  numeric = [all(re.fullmatch(r"[-+0-9.,x%]+", r[i] or "0") for r in cells)
             for i in range(len(headers))]
  widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
  def line(values):
    return "| " + " | ".join(v.rjust(w) if num else v.ljust(w)
                             for v, w, num in zip(values, widths, numeric)) + " |"
  rule = "|" + "|".join(("-" * (w + 1) + ":") if num else ("-" * (w + 2))
                        for w, num in zip(widths, numeric)) + "|"
  return "\n".join([line(headers), rule, *(line(r) for r in cells)]) + "\n"


def _skeleton() -> str:
  text = _HEADER.format(machine=machine_description())
  for key, title in SECTIONS.items():
    text += f"\n## {title}\n\nWritten by {WRITERS[key]}\n"
  return text


def write_section(key: str, body: str, path: str | os.PathLike | None = None) -> pathlib.Path:
  """Replaces section `key` (a key of `SECTIONS`) of the results file with `body`.

  The file is created with every section (placeholders for those not yet
  measured) when it does not exist; other sections are left as they are.
  """
  if key not in SECTIONS:
    raise ValueError(f"unknown results section {key!r}: use one of {sorted(SECTIONS)}")
  path = pathlib.Path(path) if path is not None else RESULTS
  text = path.read_text() if path.exists() else _skeleton()
  heading = f"## {SECTIONS[key]}"
  new = f"{heading}\n\n{body.strip()}\n"
  pattern = re.compile(rf"^{re.escape(heading)}[ \t]*\n.*?(?=^## |\Z)", re.S | re.M)
  if pattern.search(text):
    text = pattern.sub(lambda _: new + "\n", text, count=1).rstrip() + "\n"
  else:
    text = text.rstrip() + "\n\n" + new
  path.write_text(text)
  return path


@dataclasses.dataclass
class PartitionCall:
  """One partition as `mpmd.jit` runs it: what both C++ calls were given
  (to replay them) and what they returned."""
  module_text: str
  spec: Any
  #: The options as `finish` saw them (the import reads the same object).
  options: Any
  #: Per mesh, the units in order (empty: no schedule).
  schedule: list
  imported_text: str
  result: Any
  seconds: float

  def replay(self) -> tuple[Any, Any]:
    """Runs both calls again: (the ImportedProgram, the PartitionResult)."""
    imported = _mpmd.import_program(self.module_text, self.spec, self.options)
    if not imported.ok:
      raise SystemExit(f"import failed:\n{imported.error}")
    return imported, imported.finish(self.schedule, self.options)


class _RecordingImported:
  """An `ImportedProgram` that records its `finish` call."""

  def __init__(self, imported: Any, text: str, spec: Any, start: float,
               calls: list[PartitionCall]):
    self._imported, self._text, self._spec, self._start = imported, text, spec, start
    self._calls = calls

  def __getattr__(self, name: str) -> Any:
    return getattr(self._imported, name)

  def finish(self, schedule: list, options: Any) -> Any:
    result = self._imported.finish(schedule, options)
    seconds = time.perf_counter() - self._start
    self._calls.append(PartitionCall(self._text, self._spec, options, schedule,
                                     self._imported.text(), result, seconds))
    return result


class _RecordingMpmd:
  """`mpmd._mpmd` with `import_program` recording (see `TimedMpmdJit`)."""

  def __init__(self, calls: list[PartitionCall]):
    self._calls = calls

  def __getattr__(self, name: str) -> Any:
    return getattr(_mpmd, name)

  def import_program(self, text: str, spec: Any, options: Any) -> Any:
    start = time.perf_counter()
    imported = _mpmd.import_program(text, spec, options)
    return _RecordingImported(imported, text, spec, start, self._calls)


class TimedMpmdJit(MpmdJitted):
  """`mpmd.jit` that records each C++ partition of `lower`.

  `calls` holds, per partition of the last `lower`, a `PartitionCall`: the
  inputs of both calls (to replay them), the result and the wall time.
  """

  def __init__(self, fun: Callable, config: mpmd.MpmdConfig):
    super().__init__(fun, config, ())
    self.calls: list[PartitionCall] = []

  def lower(self, *args, **kwargs):
    self.calls = []
    real = partition_module._mpmd
    partition_module._mpmd = _RecordingMpmd(self.calls)
    try:
      return super().lower(*args, **kwargs)
    finally:
      partition_module._mpmd = real

  @property
  def partition_seconds(self) -> float:
    return sum(call.seconds for call in self.calls)


@dataclasses.dataclass
class Problem:
  """A step function, its arguments and an MPMD config for it."""
  step: Callable
  args: tuple
  config: mpmd.MpmdConfig
  num_named: int  # named computation call sites in the forward pass


def sgd_microbatched_step(loss_fn: Callable[..., Any], lr: float = 0.05) -> Callable[..., Any]:
  """`step(params, xs, ys) -> (mean loss, params)`: SGD on the mean loss of
  the microbatches xs [M, ...], ys [M, ...], gradients accumulated over an
  `mpmd.enumerated_for` (the planner benchmarks' step)."""
  def step(params, xs, ys):
    m = xs.shape[0]

    def microbatch(carry, i, batch):
      loss, grads = carry
      value, g = jax.value_and_grad(loss_fn)(params, *batch)
      return loss + value, jax.tree.map(jnp.add, grads, g)

    init = (jnp.zeros(()), jax.tree.map(jnp.zeros_like, params))
    loss, grads = mpmd.enumerated_for(microbatch, init, (xs, ys))
    return loss / m, jax.tree.map(lambda p, g: p - lr * g / m, params, grads)
  return step


#: XLA flags added in the `--quick` smoke runs: LLVM without its optimisation
#: passes. On the CPU most of a small model's compile is spent in them (the
#: auto_stages model's step under `jax.jit`: 16 s -> 4 s of compile on a loaded
#: core); a smoke run checks that a script runs end to end and writes its table,
#: not its timings. Full-size runs keep XLA's defaults.
QUICK_XLA_FLAGS = ("--xla_backend_optimization_level=0",)


def quick_env(env: dict[str, str]) -> dict[str, str]:
  """`env` with `QUICK_XLA_FLAGS` added to its XLA_FLAGS (for a `--quick` child)."""
  flags = env.get("XLA_FLAGS", "").split()
  flags += [f for f in QUICK_XLA_FLAGS if f not in flags]
  return {**env, "XLA_FLAGS": " ".join(flags)}


def run_pinned_worker(script: str, child_args: Sequence[str], name: str, *,
                      quick: bool = False) -> dict:
  """Runs `script --worker <json> <child_args>` as 2 processes of one CPU
  device, each pinned to its own core (`python -m mpmd.launch`), and returns
  the JSON the worker wrote; raises with the processes' output if it fails.
  `quick`: a smoke run (compiled with `QUICK_XLA_FLAGS`)."""
  import json  # pylint: disable=import-outside-toplevel
  import subprocess  # pylint: disable=import-outside-toplevel
  import tempfile  # pylint: disable=import-outside-toplevel
  root = pathlib.Path(__file__).resolve().parents[1]
  with tempfile.TemporaryDirectory() as tmp:
    out = pathlib.Path(tmp) / f"{name}.json"
    cmd = [sys.executable, "-m", "mpmd.launch", "--processes", "2", "--devices-per-process", "1",
           "--cpus-per-process", "1", "--timeout", "1500",
           str(pathlib.Path(script).resolve()), "--worker", str(out), *child_args]
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)  # the launcher sets the device count
    if quick:
      env = quick_env(env)  # (the launcher keeps other flags and adds the device count)
    env["JAX_PLATFORMS"] = "cpu"
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1600, env=env, cwd=root)
    if done.returncode != 0:
      raise RuntimeError(f"the 2-process run failed ({done.returncode}):\n"
                         f"{done.stdout[-4000:]}\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


def topology(num_meshes: int, devices_per_mesh: int) -> dict[str, jax.sharding.Mesh]:
  devices = np.array(jax.devices())
  if len(devices) < num_meshes * devices_per_mesh:
    raise SystemExit(f"need {num_meshes * devices_per_mesh} devices, have {len(devices)}: "
                     "set XLA_FLAGS=--xla_force_host_platform_device_count=8 before jax starts")
  return {f"m{i}": jax.sharding.Mesh(devices[i * devices_per_mesh:(i + 1) * devices_per_mesh],
                                     ("data",))
          for i in range(num_meshes)}


def mlp_problem(layers: int, microbatches: int, *, stages: int = 4, width: int = 64,
                batch: int = 8, devices_per_mesh: int = 2,
                schedule: str | None = "1F1B") -> Problem:
  """A training step of an MLP pipelined over `stages` meshes.

  `layers` dense+gelu layers, split evenly into `stages` named computations
  ("stage0", ...; stage k on mesh "mk"); the batch is split into
  `microbatches` microbatches (`mpmd.call` with call_counter i), gradients are
  accumulated and an SGD update follows. A fresh function is built on every
  call so that no JAX cache is shared between measurements.
  """
  if layers % stages:
    raise ValueError(f"layers={layers} is not a multiple of stages={stages}")
  per_stage = layers // stages
  keys = jax.random.split(jax.random.key(0), layers)
  params = [[{"w": jax.random.normal(keys[s * per_stage + i], (width, width)) / np.sqrt(width),
              "b": jnp.zeros((width,))} for i in range(per_stage)] for s in range(stages)]
  xs = [jnp.full((batch, width), 0.01 * (i + 1)) for i in range(microbatches)]
  ys = [jnp.full((batch, width), -0.01 * (i + 1)) for i in range(microbatches)]

  def stage_fn(layer_params, h):
    for p in layer_params:
      h = jax.nn.gelu(h @ p["w"] + p["b"])
    return h

  def loss_fn(params, x, y):
    h = x
    for s, layer_params in enumerate(params):
      h = mpmd.named_computation(stage_fn, name=f"stage{s}")(layer_params, h)
    return jnp.mean((h - y) ** 2)

  def step(params, xs, ys):
    loss, grads = jnp.zeros(()), jax.tree.map(jnp.zeros_like, params)
    for i, (x, y) in enumerate(zip(xs, ys)):
      def microbatch(loss, grads, x, y):
        l, g = jax.value_and_grad(loss_fn)(params, x, y)
        return loss + l, jax.tree.map(jnp.add, grads, g)
      loss, grads = mpmd.call(microbatch, call_counter=i)(loss, grads, x, y)
    n = len(xs)
    return loss / n, jax.tree.map(lambda p, g: p - 0.1 * g / n, params, grads)

  config = mpmd.make_config(topology(stages, devices_per_mesh),
                            {f"stage{s}": f"m{s}" for s in range(stages)},
                            pipeline_schedule=schedule)
  return Problem(step, (params, xs, ys), config, stages * microbatches)

