//===- Pipeline.h - the partitioner's plain C++ API ---------------*- C++ -*-===//
//
// The boundary between Python and the C++ compiler: plain structs in, an
// owning handle and plain structs out. No MLIR header is included here, so the
// nanobind translation unit (built with RTTI) can use it; the passes use the
// same structs for their typed options.
//
// A partition is two calls:
//
//   ImportedProgram imported = importProgram(moduleText, spec, options);
//   PartitionResult result = imported.finish(schedule, options);
//
// `importProgram` parses the module JAX lowered and runs the import pipeline
// (fragments on meshes, transfers, mesh inference); the handle owns its MLIR
// context and module and lists the program's scheduling units, from which the
// caller resolves a schedule. `finish` runs the optimize and export pipelines
// on a copy of the imported module (so it may be called again, e.g. with
// another schedule) and returns the program.
//
//===----------------------------------------------------------------------===//

#ifndef MPMD_PIPELINE_H
#define MPMD_PIPELINE_H

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace mpmd {

//===----------------------------------------------------------------------===//
// What to partition
//===----------------------------------------------------------------------===//

/// A named mesh of the topology: its axes in order, with sizes.
struct MeshSpec {
  std::string name;
  std::vector<std::pair<std::string, int64_t>> axes;
};

/// A label (named computation or named tensor) placed on a mesh, and on a
/// stage of that mesh when `stage` >= 0.
struct NameAssignment {
  std::string name;
  std::string mesh;
  int64_t stage = -1;
};

/// A flat input or output of the entry function placed on a mesh.
struct IndexAssignment {
  int64_t index = 0;
  std::string mesh;
};

/// The program's meshes and where its labels, inputs and outputs go.
struct ProgramSpec {
  /// Name of the entry function.
  std::string func_name = "main";
  std::vector<MeshSpec> topology;
  std::vector<NameAssignment> assignment;
  std::vector<IndexAssignment> input_assignment;
  std::vector<IndexAssignment> output_assignment;
};

/// A scheduling unit: the forward ("F"), backward ("B") or weight-gradient
/// ("W") fragments of one microbatch of one stage on one mesh: the one unit
/// type of the C++ code (schedules, merge rules, a program's units). In a
/// schedule given by the user, `stage` < 0 means "the stage numbered like the
/// mesh"; a program's units always have their stage. Written `F3`, `B0.s5`
/// (`formatUnit`, lib/Transforms/Common/TextOptions.h).
struct Unit {
  std::string mesh;
  std::string kind;
  int64_t microbatch = 0;
  int64_t stage = -1;

  bool operator==(const Unit &o) const {
    return std::tie(mesh, kind, microbatch, stage) ==
           std::tie(o.mesh, o.kind, o.microbatch, o.stage);
  }
  bool operator<(const Unit &o) const {
    return std::tie(mesh, kind, microbatch, stage) <
           std::tie(o.mesh, o.kind, o.microbatch, o.stage);
  }
};

/// Per mesh, the order of its units (each list holds the units of one mesh);
/// empty: the program runs in the order JAX emitted it.
using Schedule = std::vector<std::vector<Unit>>;

/// Groups of units of one mesh to merge into one program each.
using MergeRules = std::vector<std::vector<Unit>>;

//===----------------------------------------------------------------------===//
// How to partition
//===----------------------------------------------------------------------===//

/// The phase of the partition whose pipeline reads a flag: its `mpmd-opt`
/// text option belongs to `-mpmd-<phase>-pipeline`.
enum class Phase { Import, Optimize, Export };

/// Every boolean partitioning option, one row each: the only place an option
/// is defined. X(name, default, phase, text, user, doc):
///   name     the field of `PartitionOptions`; the user's option is
///            `mpmd_<name>` (mpmd/config.py reads this table through the
///            binding's `PARTITION_FLAGS`);
///   default  its value when not set, for users, the driver and `mpmd-opt`;
///   phase    the pipeline that reads it (`Phase::<phase>`);
///   text     its text option of `-mpmd-<phase>-pipeline` (lib/Transforms/
///            Passes.cpp registers one per row; the replay arguments,
///            lib/Driver/MpmdOptArgs.cpp, write it);
///   user     whether users set it in `partitioning_options` (else the
///            driver sets it from the schedule);
///   doc      what it does, for users (docs/api.md's table is generated from
///            it by `python -m mpmd.options_doc`) and `mpmd-opt --help`.
/// Rows read by a pass: the pass's constructor taking `PartitionOptions`
/// copies the flag (include/mpmd/Transforms/Passes.h), and the pass's own
/// option is the row's TableGen record `MpmdFlag_<name>` (the build writes
/// them from this table: tools/mpmd-flag-options); rows that add a pass:
/// the pipeline builder in lib/Transforms/Passes.cpp tests the flag.
#define MPMD_PARTITION_FLAGS(X)                                                                    \
  X(infer_transfers, false, Import, "infer-transfers", true,                                      \
    "create transfers that no label implies (a computed value needed by an unlabelled op on "     \
    "another mesh) instead of raising `PartitionError`; implies "                                 \
    "`mpmd_infer_cross_mesh_reductions`")                                                          \
  X(infer_cross_mesh_reductions, false, Import, "infer-cross-mesh-reductions", true,              \
    "an elementwise add/max/min/mul/and/or of values from different meshes (e.g. the gradient "   \
    "of a weight used on two meshes) becomes one cross-mesh reduction (a chain of them, "         \
    "`(a + b) + c`, is one sum); what is computed from such sums alone (a global gradient norm) " \
    "goes to every mesh that reads it")                                                            \
  X(split_bwd_fragments, false, Optimize, "split-bwd-fragments", true,                            \
    "split each backward into activation gradient (B) and weight gradient (W); implied by "       \
    "schedules with `W` units")                                                                    \
  X(batch_weight_gradients, false, Optimize, "batch-weight-gradients", true,                      \
    "compute each mesh's weight gradients once for a run of microbatches, from their inputs "     \
    "concatenated along the batch, instead of once per microbatch added into the accumulators "  \
    "(-mpmd-batch-weight-gradients; splits backwards into B and W units): one large product "    \
    "per weight where small microbatches make many small ones; meshes of one device; each "      \
    "microbatch's saved activations live until its mesh's last W unit, and the gradients are "  \
    "summed in another order than `jax.jit` of the same microbatched step sums them")            \
  X(fragment_remat, false, Optimize, "fragment-remat", true,                                      \
    "recompute a forward right before its backward when other work runs between them (less "     \
    "activation memory, more compute)")                                                            \
  X(merge_remat_fragments, false, Optimize, "merge-remat-fragments", true,                        \
    "with `mpmd_fragment_remat` (a `ConfigError` without it): merge the recomputation into the "  \
    "backward")                                                                                    \
  X(merge_forward_with_backward, true, Optimize, "merge-forward-with-backward", true,             \
    "merge a forward with the backward that runs right after it on the same mesh (the last "      \
    "stage of 1F1B; its calls are named `F3+B3`); set False to keep them two programs")          \
  X(merge_inferred_after_scheduling, false, Optimize, "merge-inferred", false,                    \
    "keep inferred fragments apart during import and merge them after scheduling (set when a "    \
    "schedule follows: merging earlier would tie microbatches together; the import pipeline's "   \
    "own `merge-inferred` is its opposite)")                                                       \
  X(recompute_operand_views, true, Export, "recompute-operand-views", true,                      \
    "a fragment result that is only a view of one of its operands (a weight transposed for "     \
    "`x @ w.T`, saved for the backward) is recomputed by the fragments of its mesh that read "   \
    "it instead of being written and handed over for every microbatch")                         \
  X(pack_fragment_values, true, Export, "pack-fragment-values", true,                            \
    "on meshes of one device, hand the values one fragment passes to the next fragment of its "  \
    "mesh alone (gradient accumulators, saved activations) over as one buffer per element type: " \
    "fewer buffers per call, less host time per call (a copy on the device where XLA cannot "     \
    "pack in place); values up to 16 KiB on CPU, of any size on other platforms")                 \
  X(pack_large_fragment_values, false, Export, "pack-large-fragment-values", false,               \
    "with `pack_fragment_values`: pack values of any size, not only those up to 16 KiB (set by "  \
    "the driver where the devices are not CPUs: a device copy costs less there than a buffer's "  \
    "host time per call)")                                                                         \
  X(partial_sums, true, Export, "partial-sums", false,                                          \
    "hold gradient accumulators of meshes of several devices as unreduced partial sums where "   \
    "every value of the chain stays on its mesh (-mpmd-mark-partial-sums): one all-reduce a "     \
    "step in the call that reads the sum whole, as `jax.jit` of the whole batch; set by the "     \
    "driver from `MPMD_PARTIAL_SUMS`")                                                             \
  X(validate_no_backward_deps, true, Export, "validate-no-backward-deps", false,                  \
    "check that forward-only programs flow from earlier to later meshes (off for wrap-around "    \
    "schedules)")                                                                                  \
  X(fail_on_backward_deps, false, Export, "fail-on-backward-deps", true,                          \
    "the program must be forward-only: a fragment that reads a value computed on a later mesh "  \
    "is an error instead of a warning, and so is a backward fragment (never checked under a "     \
    "wrap-around schedule)")

/// Every option of a partition, in one typed structure. The same value is
/// given to `importProgram` and `finish` (each reads the options of its
/// pipelines).
struct PartitionOptions {
#define MPMD_DECLARE_FLAG(name, init, phase, text, user, doc) bool name = init;
  MPMD_PARTITION_FLAGS(MPMD_DECLARE_FLAG)
#undef MPMD_DECLARE_FLAG
  /// Units to merge into one program (after scheduling).
  MergeRules merge_rules;
  /// What a program call costs on the meshes' platform, measured
  /// (`mpmd.partition.dispatch_cost`): -mpmd-merge-back-to-back-units merges
  /// a mesh's back-to-back units where the second's estimated run time is at
  /// most `call_us`. Zero (the default): no such merging.
  struct DispatchCost {
    double call_us = 0;
    double kernel_us = 0;
    double gflops = 0;
  } dispatch_cost;
};

//===----------------------------------------------------------------------===//
// What comes back
//===----------------------------------------------------------------------===//

/// The type of a value a fragment function takes or returns.
struct TensorSpec {
  /// NumPy's (or ml_dtypes') name of the element type: "float32", "bfloat16",
  /// "int8", "uint32", "bool", "complex64", "float8_e4m3fn", ...; empty for
  /// a type that is not a tensor of one of those.
  std::string dtype;
  std::vector<int64_t> shape;
};

/// One outlined fragment function, ready to compile on its mesh.
struct FragmentFunction {
  std::string name;
  /// A standalone module whose public `@main` is the fragment body (global
  /// view), in generic form with locations.
  std::string module_text;
  int64_t num_inputs = 0;
  int64_t num_outputs = 0;
  /// Arguments the function may consume (`jax.buffer_donor`).
  std::vector<int64_t> donated_args;
  /// The types of its arguments and results (global view).
  std::vector<TensorSpec> input_types;
  std::vector<TensorSpec> output_types;
  /// What the program does besides computing, read off its ops here so that
  /// the runtime never reads the text: it calls a host callback (a custom
  /// call whose target is one of JAX's Python callbacks: `jax.debug.print`,
  /// `jax.pure_callback`, `io_callback`)...
  bool calls_host = false;
  /// ... it has an op whose effects reach outside it (a host callback, an op
  /// marked `has_side_effect`, send, recv, infeed or outfeed)...
  bool has_side_effects = false;
  /// ... it has a `stablehlo.while` loop.
  bool has_loops = false;
  /// (result index, argument index) for each result that is `stablehlo.add`
  /// of that argument and another value, of the same type, a tensor of rank
  /// 1 or more of f16, bf16, f32 or f64: an accumulator the program adds a
  /// term to (each argument once; a scalar, such as a summed loss, is not
  /// one).
  std::vector<std::pair<int64_t, int64_t>> accumulated;
};

/// One step of the program, in execution order.
struct Instruction {
  enum class Kind { kCall, kTransfer };
  Kind kind = Kind::kCall;
  /// kCall: the fragment function; kTransfer: empty.
  std::string callee;
  /// kCall: the mesh it runs on; kTransfer: the destination mesh.
  std::string mesh;
  /// kTransfer: the source mesh.
  std::string src_mesh;
  std::vector<int64_t> operands;
  std::vector<int64_t> results;
  /// Origins of the fragment, as `name` or `name(k)`.
  std::vector<std::string> origins;
  /// Source location of the op, for error messages.
  std::string location;
  /// kCall of a scheduling unit: its name, e.g. "F3" or "B2.s5"; else empty.
  std::string unit;
  /// kTransfer: the transfer is the last use of its operand, which may be
  /// freed once copied (`mpmd.donate`).
  bool donate = false;
  /// kTransfer: the tensor type of the value moved (e.g. `tensor<4x8xf32>`),
  /// which a process that does not produce the value needs to receive it.
  std::string value_type;
  /// kTransfer: the memory kinds of the source and of the result ("" for
  /// the default, device memory; "pinned_host": host memory). A transfer
  /// within one mesh moves a value between memory kinds.
  std::string src_memory_kind;
  std::string memory_kind;
  /// kCall: (result index, operand index) for each result the call holds as
  /// unreduced partial sums (-mpmd-mark-partial-sums): the operand it adds
  /// a term to, held so too; -1 when the call starts the chain (its
  /// result, the first microbatch's gradient, is made unreduced).
  std::vector<std::pair<int64_t, int64_t>> partial_results;
};

/// A splat the program takes as an input that the runtime provides itself
/// (made by -mpmd-parameterize-fragment-constants): place it on `mesh` once
/// and pass it as value `id` on every run (a fresh copy to a call that
/// consumes it, when `donated`).
struct ConstantInput {
  int64_t id = 0;
  std::string mesh;
  /// NumPy's name of the element type ("int32", "uint32", "float32", "bool", ...).
  std::string dtype;
  /// The value of every element, in decimal (floats with enough digits to
  /// round-trip).
  std::string value;
  /// The array's shape (empty: a scalar).
  std::vector<int64_t> shape;
  /// A call consumes it (the argument is a buffer donor).
  bool donated = false;
  /// A chain of partial sums starts from it (an accumulator's zeros, laid
  /// out unreduced; -mpmd-mark-partial-sums).
  bool partial = false;
};

/// The partitioned program.
struct PartitionResult {
  bool ok = false;
  /// Diagnostics (with source locations) when !ok.
  std::string error;
  /// Warnings of a successful run, one per line, with source locations.
  std::string warnings;
  std::vector<FragmentFunction> functions;
  std::vector<Instruction> program;
  /// Value ids and meshes of the entry function's inputs and outputs.
  std::vector<int64_t> input_ids;
  std::vector<std::string> input_meshes;
  std::vector<int64_t> output_ids;
  std::vector<std::string> output_meshes;
  /// Per input / output, its memory kind ("" for the default, device
  /// memory; "pinned_host": host memory).
  std::vector<std::string> input_memory_kinds;
  std::vector<std::string> output_memory_kinds;
  /// Inputs the runtime provides (not among `input_ids`).
  std::vector<ConstantInput> constants;
  /// The MPMD module after export.
  std::string exported_text;
  /// Seconds the optimize and export pipelines took.
  double seconds = 0;
  /// The `mpmd-opt` arguments that redo this partition (import, optimize and
  /// export pipelines with the text options of this request, schedule and
  /// options): `mpmd-opt <lowered module> <these>` prints `exported_text`.
  /// Set for a failed optimize or export too.
  std::vector<std::string> mpmd_opt_args;
};

/// A module after the import pipeline. It owns its MLIR context and module
/// (no global state); both are freed with it. Not safe for concurrent use.
class ImportedProgram {
public:
  ImportedProgram();
  ImportedProgram(ImportedProgram &&) noexcept;
  ImportedProgram &operator=(ImportedProgram &&) noexcept;
  ~ImportedProgram();

  /// Whether the import succeeded; else `error` says why (with locations).
  bool ok() const;
  const std::string &error() const;
  /// Warnings of the import, one per line, with source locations.
  const std::string &warnings() const;
  /// The scheduling units of the program, in program order.
  const std::vector<Unit> &units() const;
  /// The imported module (fragments on meshes), in readable form.
  std::string text() const;
  /// Seconds the import took (parse included).
  double seconds() const;

  /// Runs the optimize pipeline (the schedule, merges, remat, split
  /// backward) and the export pipeline on a copy of the imported module.
  PartitionResult finish(const Schedule &schedule, const PartitionOptions &options) const;

  struct Impl;

private:
  static ImportedProgram importOnThisThread(const std::string &moduleText,
                                            const ProgramSpec &spec,
                                            const PartitionOptions &options);
  PartitionResult finishOnThisThread(const Schedule &schedule,
                                     const PartitionOptions &options) const;
  friend ImportedProgram importProgram(const std::string &, const ProgramSpec &,
                                       const PartitionOptions &);
  std::unique_ptr<Impl> impl;
};

/// Parses `moduleText` (the StableHLO module JAX lowered, with mpmd ops; any
/// textual form MLIR parses), places the topology on the entry function and
/// runs the import pipeline. Like `finish` and `runPipeline`, it runs on a
/// thread with a large stack and rejects modules nested deeper than
/// `kMaxNestingDepth` (mpmd/Support/Limits.h).
ImportedProgram importProgram(const std::string &moduleText, const ProgramSpec &spec,
                              const PartitionOptions &options);

/// Parses `text`, optionally runs `pipeline` (mlir-opt pass pipeline syntax,
/// e.g. "builtin.module(mpmd-import-pipeline)"), verifies and prints it.
/// Returns {ok, text or diagnostics}.
std::pair<bool, std::string> runPipeline(const std::string &text, const std::string &pipeline,
                                         bool generic);

/// The memory kinds values can be assigned to and transferred between
/// ("device", "pinned_host"), in order: mpmd/Dialect/MemoryKinds.h, the one
/// definition, for Python.
std::vector<std::string> assignableMemoryKinds();

} // namespace mpmd

#endif // MPMD_PIPELINE_H
