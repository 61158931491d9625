//===- MergeBackToBackUnits.cpp - one program where a call costs more ----===//
//
// Merges a fragment into the fragment that runs right before it on its mesh,
// with nothing arriving on the mesh in between, where its estimated run time
// is at most what a program call costs (the `call-cost` measured for the
// platform): the merge saves one call and delays what the first sends to
// other meshes by no more than that.
//
//===----------------------------------------------------------------------===//

#include "Common/DimensionNumbers.h"
#include "Common/Fragments.h"
#include "Common/MergeFragments.h"
#include "Common/PassBase.h"
#include "mpmd/Transforms/Passes.h"

#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/Format.h"

#include <limits>
#include <optional>

namespace mlir::mpmd {
#define GEN_PASS_DEF_MERGEBACKTOBACKUNITSPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

/// The number of elements of a ranked tensor type (1 for anything else).
double elements(Type type) {
  auto shaped = dyn_cast<ShapedType>(type);
  if (!shaped || !shaped.hasStaticShape())
    return 1;
  return static_cast<double>(shaped.getNumElements());
}

/// The sizes of `dims` of operand `operand`'s type, multiplied.
double sizeOf(Operation *op, unsigned operand, ArrayRef<int64_t> dims) {
  auto shaped = dyn_cast<ShapedType>(op->getOperand(operand).getType());
  double size = 1;
  if (!shaped || !shaped.hasRank())
    return size;
  for (int64_t d : dims)
    if (d >= 0 && d < shaped.getRank() && !shaped.isDynamicDim(d))
      size *= static_cast<double>(shaped.getDimSize(d));
  return size;
}

/// The contracting dimensions of the left operand of a dot product.
SmallVector<int64_t> lhsContractingDims(Operation *op) {
  return DimensionNumbers(op->getAttr("dot_dimension_numbers")).list("lhs_contracting_dimensions");
}

/// Whether op `name` costs no kernel of its own: constants, and what XLA
/// folds into its neighbours (reshapes, broadcasts, conversions, tuples).
bool isFree(StringRef name) {
  return llvm::StringSwitch<bool>(name)
      .Cases({"stablehlo.constant", "stablehlo.iota", "stablehlo.reshape"}, true)
      .Cases({"stablehlo.broadcast_in_dim", "stablehlo.convert", "stablehlo.bitcast_convert"}, true)
      .Cases({"stablehlo.tuple", "stablehlo.get_tuple_element", "mpmd.return"}, true)
      .Cases({"stablehlo.optimization_barrier", "sdy.sharding_constraint"}, true)
      .Default(false);
}

class MergeBackToBackUnitsPass
    : public MpmdPass<MergeBackToBackUnitsPass, impl::MergeBackToBackUnitsPassBase> {
public:
  using MpmdPass::MpmdPass;

  void runOnFunction(func::FuncOp func, TopologyAttr topology) {
    if (callCost < 0 || kernelCost < 0 || gflops < 0) {
      std::string figures;
      llvm::raw_string_ostream os(figures);
      os << "call-cost (" << llvm::format("%g", double(callCost)) << "), kernel-cost ("
         << llvm::format("%g", double(kernelCost)) << ") and gflops ("
         << llvm::format("%g", double(gflops)) << ")";
      func.emitError() << "-mpmd-merge-back-to-back-units: " << figures
                       << " must not be negative";
      return signalPassFailure();
    }
    if (callCost == 0)
      return;
    // Per mesh: the fragment a next one of that mesh may merge into (none
    // once something arrives on the mesh).
    llvm::StringMap<FragmentOp> last;
    for (Operation &op : llvm::make_early_inc_range(func.getBody().front())) {
      auto fragment = dyn_cast<FragmentOp>(&op);
      if (!fragment) {
        for (Type type : op.getResultTypes())
          if (auto meshTensor = dyn_cast<MeshTensorType>(type))
            last.erase(meshTensor.getMeshName());
        continue;
      }
      StringRef mesh = fragment.getMeshName();
      FragmentOp previous = last.lookup(mesh);
      if (previous && runTime(fragment) <= callCost) {
        std::string name = mergedUnitName(previous, fragment, topology);
        if (FragmentOp merged = mergeIfLegal(previous, fragment)) {
          if (!name.empty())
            merged->setAttr(kUnitAttr, StringAttr::get(func.getContext(), name));
          last[mesh] = merged;
          continue;
        }
      }
      last[mesh] = fragment;
    }
  }

private:
  /// The estimated run time of `fragment`, in microseconds: `kernelCost` per
  /// op that is not free (`isFree`; at least one), its arithmetic at
  /// `gflops`; infinite with a loop.
  double runTime(FragmentOp fragment) {
    double kernels = 0, flops = 0;
    for (Operation &op : fragment.getRegion().front()) {
      StringRef name = op.getName().getStringRef();
      if (name == "stablehlo.while")
        return std::numeric_limits<double>::infinity();
      if (!isFree(name))
        ++kernels;
      double size = op.getNumResults() ? elements(op.getResult(0).getType()) : 0;
      if (name == "stablehlo.dot_general" || name == "stablehlo.dot")
        flops += 2 * size *
                 (name == "stablehlo.dot" ? sizeOf(&op, 0, {1})
                                          : sizeOf(&op, 0, lhsContractingDims(&op)));
      else
        flops += size;
    }
    double time = std::max(kernels, 1.0) * kernelCost;
    if (gflops > 0)
      time += flops / (gflops * 1e3); // flops / (flops per microsecond)
    return time;
  }
};

} // namespace
} // namespace mlir::mpmd
