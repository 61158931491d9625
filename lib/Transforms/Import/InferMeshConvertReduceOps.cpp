//===- InferMeshConvertReduceOps.cpp - reduce<none>(add tree) to reduce<add> -===//

#include "Common/PassBase.h"
#include "mpmd/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_INFERMESHCONVERTREDUCEOPSPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

bool isSingleUseAdd(Value v) {
  Operation *def = v.getDefiningOp();
  return def && def->getName().getStringRef() == "stablehlo.add" && def->getNumOperands() == 2 &&
         def->getNumResults() == 1 && v.hasOneUse();
}

/// The leaves of the tree of single-use additions rooted at `v`, in order.
void collectLeaves(Value v, SmallVectorImpl<Value> &leaves, SmallVectorImpl<Operation *> &adds) {
  if (!isSingleUseAdd(v)) {
    leaves.push_back(v);
    return;
  }
  Operation *add = v.getDefiningOp();
  adds.push_back(add);
  for (Value operand : add->getOperands())
    collectLeaves(operand, leaves, adds);
}

class InferMeshConvertReduceOpsPass
    : public CheckedPass<InferMeshConvertReduceOpsPass, impl::InferMeshConvertReduceOpsPassBase> {
public:
  using CheckedPass::CheckedPass;

  void runOnCheckedOperation() {
    func::FuncOp func = getOperation();
    SmallVector<ReduceOp> reduces;
    func.walk([&](ReduceOp op) { reduces.push_back(op); });
    for (ReduceOp reduce : reduces) {
      if (reduce.getReduction().getReductionType() != ReductionType::kNone ||
          reduce.getTensors().size() != 1 || !isSingleUseAdd(reduce.getTensors().front()))
        continue;
      SmallVector<Value> leaves;
      SmallVector<Operation *> adds;
      collectLeaves(reduce.getTensors().front(), leaves, adds);
      OpBuilder builder(reduce);
      auto flat = ReduceOp::create(builder,
          reduce.getLoc(), reduce.getType(), leaves,
          ReductionAttr::get(builder.getContext(), ReductionType::kAdd));
      reduce.getResult().replaceAllUsesWith(flat.getResult());
      reduce.erase();
      for (Operation *add : adds) // Root first: each is unused once its user is gone.
        add->erase();
    }
  }
};

} // namespace
} // namespace mlir::mpmd
