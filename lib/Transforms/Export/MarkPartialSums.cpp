//===- MarkPartialSums.cpp - accumulators held as unreduced partial sums ---===//

#include "Common/Fragments.h"
#include "Common/PassBase.h"
#include "mpmd/Transforms/Passes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_MARKPARTIALSUMSPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

/// How a value joined an accumulator chain: the chain and the value (the
/// operand of the call that makes it) it adds a term to.
struct Link {
  Value chain;      // the value the chain starts from
  Value source;     // the value this one adds a term to
  int64_t operand;  // ... as the operand index of the call that makes this one
};

class MarkPartialSumsPass : public MpmdPass<MarkPartialSumsPass, impl::MarkPartialSumsPassBase> {
public:
  void runOnFunction(func::FuncOp func, TopologyAttr topology) {
    auto module = func->getParentOfType<ModuleOp>();
    llvm::DenseMap<StringRef, std::vector<std::pair<int64_t, int64_t>>> accumulatedOf;
    auto accumulated = [&](FragmentCallOp call) -> ArrayRef<std::pair<int64_t, int64_t>> {
      auto [it, inserted] = accumulatedOf.try_emplace(call.getCallee());
      if (inserted)
        if (auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee()))
          it->second = accumulatedArguments(callee);
      return it->second;
    };
    auto isStartConstant = [&](Value v) {
      auto arg = dyn_cast<BlockArgument>(v);
      return arg && arg.getOwner() == &func.getBody().front() &&
             func.getArgAttr(arg.getArgNumber(), kConstantArgAttr) &&
             func.getArgAttr(arg.getArgNumber(), kBufferDonorAttr);
    };

    // The chains, in program order: each value a call adds a term to a
    // chain's last value with joins it. (A call reads only values of its own
    // mesh, the fragment_call verifier checks, so a chain stays on the mesh
    // of the call that starts it.)
    llvm::DenseMap<Value, Value> chainOf;       // value -> the value its chain starts from
    llvm::MapVector<Value, Link> links;         // value -> how it joined its chain
    for (FragmentCallOp call : func.getBody().front().getOps<FragmentCallOp>()) {
      MeshAttr mesh = topology.getMesh(call.getMeshName());
      if (!mesh || mesh.getNumDevices() < 2)
        continue;
      for (auto [j, k] : accumulated(call)) {
        if (k >= call->getNumOperands() || j >= call->getNumResults())
          continue;
        Value source = call->getOperand(k), result = call->getResult(j);
        Value chain = chainOf.lookup(source);
        if (!chain) {
          // A chain starts at an accumulator's zeros or at a value an earlier
          // call made (not one a transfer brought).
          if (!isStartConstant(source) && !source.getDefiningOp<FragmentCallOp>())
            continue;
          chain = chainOf[source] = source;
        }
        chainOf[result] = chain;
        links[result] = Link{chain, source, k};
      }
    }
    if (links.empty())
      return;

    // A value read anywhere but by a call of its mesh (a transfer, a result of
    // the function) must be whole. (A call of its mesh reads it whole or adds
    // to it, as it needs: XLA reduces it inside the program.)
    llvm::DenseSet<Value> readOutside;
    for (Operation &op : func.getBody().front()) {
      if (isa<FragmentCallOp>(op))
        continue;
      for (Value v : op.getOperands())
        if (chainOf.contains(v))
          readOutside.insert(v);
    }
    // The last of a chain read so is reduced by the call that makes it (an
    // end); a chain read so anywhere else is held reduced throughout.
    llvm::DenseSet<Value> addedTo;
    for (auto &[value, link] : links)
      addedTo.insert(link.source);
    llvm::DenseSet<Value> broken;
    for (Value v : readOutside)
      if (addedTo.contains(v) || chainOf.lookup(v) == v)
        broken.insert(chainOf.lookup(v));

    // The marks, per call (result index, operand index or -1).
    llvm::MapVector<Operation *, SmallVector<std::pair<int64_t, int64_t>>> marks;
    llvm::DenseSet<Value> started;
    for (auto &[value, link] : links) {
      if (broken.contains(link.chain) || readOutside.contains(value))
        continue;
      auto result = cast<OpResult>(value);
      marks[result.getOwner()].emplace_back(result.getResultNumber(), link.operand);
      if (link.source == link.chain && started.insert(link.source).second) {
        if (auto arg = dyn_cast<BlockArgument>(link.source)) {
          func.setArgAttr(arg.getArgNumber(), kPartialSumAttr, UnitAttr::get(func.getContext()));
        } else {
          auto made = cast<OpResult>(link.source);
          marks[made.getOwner()].emplace_back(made.getResultNumber(), -1);
        }
      }
    }
    for (auto &[op, pairs] : marks) {
      llvm::sort(pairs);
      SmallVector<int64_t> results, sources;
      for (auto [j, k] : pairs) {
        results.push_back(j);
        sources.push_back(k);
      }
      op->setAttr(kPartialResultsAttr, DenseI64ArrayAttr::get(op->getContext(), results));
      op->setAttr(kPartialSourcesAttr, DenseI64ArrayAttr::get(op->getContext(), sources));
    }
  }
};

} // namespace
} // namespace mlir::mpmd
