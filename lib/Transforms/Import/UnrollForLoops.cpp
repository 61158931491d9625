//===- UnrollForLoops.cpp - fully unroll mpmd.for ---------------------------===//

#include "Common/PassBase.h"
#include "Common/StableHloOps.h"
#include "mpmd/Support/Limits.h"
#include "mpmd/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/IRMapping.h"

#include <cstdint>
#include <functional>

namespace mlir::mpmd {
#define GEN_PASS_DEF_UNROLLFORLOOPSPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

/// The ops `op` stands for once every loop in it is unrolled (itself included).
uint64_t unrolledSize(Operation *op) {
  uint64_t inner = 0;
  for (Region &region : op->getRegions())
    for (Block &block : region)
      for (Operation &nested : block)
        inner = ::mpmd::saturatingAdd(inner, unrolledSize(&nested));
  if (auto loop = dyn_cast<ForOp>(op))
    return ::mpmd::saturatingAdd(1, ::mpmd::saturatingMul(inner, loop.getIterations()));
  return ::mpmd::saturatingAdd(1, inner);
}

class UnrollForLoopsPass : public CheckedPass<UnrollForLoopsPass, impl::UnrollForLoopsPassBase> {
public:
  using CheckedPass::CheckedPass;

  void runOnCheckedOperation() {
    if (failed(checkLoopDepth()) || failed(checkUnrolledSize()))
      return signalPassFailure();
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

private:
  /// Most `mpmd.for` loops nested in one another: unrolling copies each
  /// level's inner levels, so the time grows with the square of the depth.
  static constexpr int64_t kMaxLoopDepth = 256;

  /// Fails at the first loop nested more than `kMaxLoopDepth` deep.
  LogicalResult checkLoopDepth() {
    ForOp tooDeep;
    std::function<void(Operation *, int64_t)> visit = [&](Operation *op, int64_t depth) {
      if (tooDeep)
        return;
      if (isa<ForOp>(op) && ++depth > kMaxLoopDepth) {
        tooDeep = cast<ForOp>(op);
        return;
      }
      for (Region &region : op->getRegions())
        for (Block &block : region)
          for (Operation &nested : block)
            visit(&nested, depth);
    };
    visit(getOperation(), 0);
    if (!tooDeep)
      return success();
    return tooDeep.emitError() << "this mpmd.for is nested in " << kMaxLoopDepth
                               << " other mpmd.for loops, the most mpmd unrolls: flatten the "
                                  "loop nest";
  }

  /// Fails, on the largest outermost loop, when the unrolled function would
  /// have more than `maxUnrolledOps` ops; the error gives the function's
  /// unrolled size (what the limit caps) and the loop's share of it. A
  /// function without loops passes whatever its size.
  LogicalResult checkUnrolledSize() {
    if (maxUnrolledOps == 0)
      return success();
    uint64_t total = unrolledSize(getOperation());
    if (total <= maxUnrolledOps)
      return success();
    ForOp largest;
    uint64_t largestSize = 0;
    getOperation().walk([&](ForOp loop) {
      if (loop->getParentOfType<ForOp>())
        return;
      if (uint64_t size = unrolledSize(loop); !largest || size > largestSize)
        largest = loop, largestSize = size;
    });
    if (!largest)
      return success(); // No loop to unroll: the function's own size is not ours to cap.
    auto diag = largest.emitError()
                << "unrolling this mpmd.for (" << largest.getIterations() << " iterations"
                << (largest->walk([&](ForOp inner) {
                      return inner == largest ? WalkResult::advance() : WalkResult::interrupt();
                    }).wasInterrupted()
                        ? ", with nested loops"
                        : "")
                << ") would make @" << getOperation().getSymName() << " "
                << ::mpmd::describeSize(total) << " ops (" << ::mpmd::describeSize(largestSize)
                << " of them this loop's), over the limit of " << uint64_t(maxUnrolledOps)
                << " ops a function (option max-unrolled-ops of -mpmd-unroll-for-loops): use "
                   "fewer iterations (microbatches), or raise the limit";
    return diag;
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
      Value index = createStableHloConstant(builder, loop.getLoc(),
                                            DenseElementsAttr::get(indexType, APInt(32, i)));
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
