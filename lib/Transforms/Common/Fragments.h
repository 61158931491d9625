//===- Fragments.h - what a fragment is in the pipeline ----------*- C++ -*-===//
//
// Classification of fragments (forward, backward, scheduling unit), their
// microbatch, and how diagnostics name them.
//
//===----------------------------------------------------------------------===//
#ifndef MPMD_LIB_TRANSFORMS_COMMON_FRAGMENTS_H
#define MPMD_LIB_TRANSFORMS_COMMON_FRAGMENTS_H

#include "mpmd/Dialect/MpmdDialect.h"
#include "mpmd/Pipeline.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <optional>

namespace mlir::mpmd {

/// The index of mesh `name` in `topology`, or -1.
int64_t getMeshIndex(TopologyAttr topology, StringRef name);

/// Whether `op` is a `stablehlo.optimization_barrier` (each result is its
/// operand; `jax.checkpoint` puts one before a recomputation).
bool isOptimizationBarrier(Operation *op);

/// Whether the caller of `func` gave up argument `index` (`donate_argnums`:
/// `jax.buffer_donor` or `tf.aliasing_output` on the argument).
bool isDonatedArgument(func::FuncOp func, unsigned index);

/// A user fragment all of whose origins have transpose count 0.
bool isForwardFragment(FragmentOp fragment);
/// A user fragment all of whose origins have transpose count >= 1.
bool isBackwardFragment(FragmentOp fragment);

/// The `call_counter` (microbatch index) of `fragment`: std::nullopt when the
/// attribute is absent; failure, with an error on the fragment, when it is not
/// an unsigned 32-bit integer.
FailureOr<std::optional<uint32_t>> getCallCounter(FragmentOp fragment);

/// Checks the `call_counter` of every fragment nested in `root`, with an error
/// on each one that is not a ui32; afterwards `*getCallCounter(f)` is safe.
LogicalResult verifyCallCounters(Operation *root);

/// The `mpmd.call`s of `callee` in `module` when nothing else refers to it;
/// std::nullopt when another op does.
std::optional<SmallVector<CallOp>> getMpmdCalls(func::FuncOp callee, ModuleOp module);

/// The next fragment on the mesh of `fragment` in its block (program order,
/// skipping fragments of other meshes and any other op), or null.
FragmentOp getNextFragmentOnMesh(FragmentOp fragment);

/// What the fragments of one computation on one mesh that differ only in
/// their microbatch (`call_counter`) share: mesh, origin, stage and markers
/// (not which operands a call consumes).
std::string siblingKey(FragmentOp fragment);

/// `fragment ["stage0"(1)] (microbatch 2, stage 0) on mesh "m0"`: how
/// diagnostics name a fragment.
std::string describeFragment(FragmentOp fragment);

/// The scheduling unit `fragment` belongs to: its mesh, kind "F" (forward),
/// "B" (backward, or its activation-gradient part) or "W" (weight-gradient
/// part), microbatch (`call_counter`) and stage (`stage` attribute, else the
/// mesh index); std::nullopt if it is not a scheduling unit (an inferred
/// fragment, no `call_counter`, or units merged: forward and backward, or
/// a fragment named `mpmd.unit` by the pass that merged it).
std::optional<::mpmd::Unit> getSchedulingUnit(FragmentOp fragment, TopologyAttr topology);

/// The `mpmd.unit` name of `first` and `second` merged into one fragment:
/// the units each runs (its `mpmd.unit`, else its scheduling unit), in
/// order, joined by `+` (`F3+B3`, `F0+F1+F2`); the one of them that runs a
/// unit when the other does not; empty when neither does.
std::string mergedUnitName(FragmentOp first, FragmentOp second, TopologyAttr topology);

/// `F3`, `B0.s5`: `formatUnit` (Common/TextOptions.h) with the index of the
/// unit's mesh in `topology`.
std::string formatUnit(const ::mpmd::Unit &unit, TopologyAttr topology);

/// (result index, argument index) for each result of fragment function
/// `callee` that is `stablehlo.add` of that argument and another value, of
/// the same type, a tensor of rank 1 or more of f16, bf16, f32 or f64: an
/// accumulator the program adds a term to (each argument once; a scalar, such
/// as a summed loss, is not one). `FragmentFunction::accumulated`.
std::vector<std::pair<int64_t, int64_t>> accumulatedArguments(func::FuncOp callee);

} // namespace mlir::mpmd

#endif // MPMD_LIB_TRANSFORMS_COMMON_FRAGMENTS_H
