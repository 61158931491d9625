//===- UnrollForLoops.cpp - fully unroll mpmd.for ---------------------------===//

#include "mpmd/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/IRMapping.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_UNROLLFORLOOPSPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

class UnrollForLoopsPass : public impl::UnrollForLoopsPassBase<UnrollForLoopsPass> {
  void runOnOperation() override {
    // Outermost loops first: unrolling one exposes the copies of its inner
    // loops, which the next round unrolls.
    while (true) {
      SmallVector<ForOp> loops;
      getOperation().walk([&](ForOp loop) {
        if (!loop->getParentOfType<ForOp>())
          loops.push_back(loop);
      });
      if (loops.empty())
        return;
      for (ForOp loop : loops)
        if (failed(unroll(loop)))
          return signalPassFailure();
    }
  }

  LogicalResult unroll(ForOp loop) {
    uint32_t iterations = loop.getIterations();
    if (std::optional<uint32_t> factor = loop.getUnrollFactor(); factor && *factor != iterations)
      return loop.emitError() << "only full unrolling is supported: unroll_factor " << *factor
                              << " must equal iterations " << iterations;
    OpBuilder builder(loop);
    MLIRContext *ctx = loop.getContext();
    auto indexType = RankedTensorType::get({}, IntegerType::get(ctx, 32, IntegerType::Unsigned));
    Block &body = loop.getRegion().front();
    SmallVector<Value> carried(loop.getOperands());
    for (uint32_t i = 0; i < iterations; ++i) {
      // The index of this iteration, as JAX's StableHLO spells a constant.
      OperationState state(loop.getLoc(), "stablehlo.constant");
      state.addTypes(indexType);
      state.propertiesAttr = builder.getDictionaryAttr(builder.getNamedAttr(
          "value", DenseElementsAttr::get(indexType, APInt(32, i))));
      Value index = builder.create(state)->getResult(0);
      IRMapping mapping;
      mapping.map(body.getArguments().drop_back(), carried);
      mapping.map(body.getArguments().back(), index);
      auto counter = IntegerAttr::get(IntegerType::get(ctx, 32, IntegerType::Unsigned), i);
      for (Operation &op : body.without_terminator()) {
        Operation *clone = builder.clone(op, mapping);
        clone->walk([&](Operation *inner) {
          if (isa<CallOp, NamedComputationOp, NamedTensorOp>(inner) &&
              !inner->hasAttr(kCallCounterAttr))
            inner->setAttr(kCallCounterAttr, counter);
        });
      }
      carried.clear();
      for (Value v : body.getTerminator()->getOperands())
        carried.push_back(mapping.lookupOrDefault(v));
    }
    loop.replaceAllUsesWith(carried);
    loop.erase();
    return success();
  }
};

} // namespace
} // namespace mlir::mpmd
