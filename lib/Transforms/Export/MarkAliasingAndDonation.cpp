//===- MarkAliasingAndDonation.cpp - buffers a fragment may consume -------===//
//
// Marks the operands of fragments (and transfers) that are the last use of
// their value, so the runtime can let the fragment reuse their buffers
// instead of keeping them alive until the end of the step.
//
//===----------------------------------------------------------------------===//

#include "Common/Fragments.h"
#include "Common/PassBase.h"
#include "mpmd/Dialect/MpmdAttrNames.h"
#include "mpmd/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_MARKALIASINGANDDONATIONPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

/// Whether `v` is also an operand of another microbatch's fragment of the
/// same computation as `fragment` (e.g. a stacked batch each microbatch
/// slices): donated to the last of them only, it would give that one a
/// program of its own.
bool sharedWithOtherMicrobatches(Value v, FragmentOp fragment) {
  if (!fragment->hasAttr(kCallCounterAttr))
    return false;
  std::string key;
  for (Operation *user : v.getUsers()) {
    auto other = dyn_cast<FragmentOp>(user);
    if (!other || other == fragment || !other->hasAttr(kCallCounterAttr) ||
        other->getAttr(kCallCounterAttr) == fragment->getAttr(kCallCounterAttr))
      continue;
    if (key.empty())
      key = siblingKey(fragment);
    if (siblingKey(other) == key)
      return true;
  }
  return false;
}

class MarkAliasingAndDonationPass
    : public MpmdPass<MarkAliasingAndDonationPass, impl::MarkAliasingAndDonationPassBase> {
public:
  void runOnFunction(func::FuncOp func, TopologyAttr) {
    Block &body = func.getBody().front();
    // The last op of the body that uses each value (the return included, so
    // returned values are never donated).
    llvm::DenseMap<Value, Operation *> lastUser;
    for (Operation &op : body)
      for (Value v : op.getOperands())
        lastUser[v] = &op;
    auto donatable = [&](Value v, Operation *user) {
      if (lastUser.lookup(v) != user)
        return false;
      if (auto arg = dyn_cast<BlockArgument>(v))
        return arg.getOwner() == &body && isDonatedArgument(func, arg.getArgNumber());
      return true;
    };
    OpBuilder builder(func.getContext());
    for (Operation &op : body) {
      if (auto fragment = dyn_cast<FragmentOp>(op)) {
        SmallVector<int64_t> donated;
        for (OpOperand &operand : fragment->getOpOperands()) {
          Value v = operand.get();
          if (!donatable(v, fragment) || llvm::count(fragment->getOperands(), v) != 1 ||
              sharedWithOtherMicrobatches(v, fragment))
            continue;
          donated.push_back(operand.getOperandNumber());
        }
        if (donated.empty())
          fragment->removeAttr(kDonatedOperandsAttr);
        else
          fragment->setAttr(kDonatedOperandsAttr, builder.getDenseI64ArrayAttr(donated));
      } else if (auto transfer = dyn_cast<TransferOp>(op)) {
        if (donatable(transfer.getTensor(), transfer))
          transfer->setAttr(kDonateAttr, builder.getUnitAttr());
        else
          transfer->removeAttr(kDonateAttr);
      }
    }
  }
};

} // namespace
} // namespace mlir::mpmd
