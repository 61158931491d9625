//===- InlineSingleBlockCallees.cpp - clone callee bodies into calls -------===//

#include "Common/InlineSingleBlockCallees.h"

#include "mpmd/Support/Limits.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace mlir::mpmd;

namespace {

/// Sizes of functions with their calls expanded, memoized.
struct InlinedSizes {
  SymbolTable &symbols;
  function_ref<bool(Operation *)> isCall;
  llvm::DenseMap<Operation *, uint64_t> memo{};
  llvm::DenseSet<Operation *> active{};

  uint64_t ofFunction(func::FuncOp func) {
    if (auto it = memo.find(func); it != memo.end())
      return it->second;
    if (!active.insert(func).second)
      return 1; // recursion: reported when inlining
    uint64_t size = 0;
    for (Block &block : func.getBody())
      for (Operation &op : block)
        size = ::mpmd::saturatingAdd(size, ofOp(&op));
    active.erase(func);
    return memo[func] = size;
  }

  uint64_t ofOp(Operation *op) {
    if (isCall(op)) {
      auto callee = op->getAttrOfType<FlatSymbolRefAttr>("callee");
      auto func = callee ? symbols.lookup<func::FuncOp>(callee.getValue()) : func::FuncOp();
      return func && !func.isExternal() ? ofFunction(func) : 1;
    }
    uint64_t size = 1;
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (Operation &nested : block)
          size = ::mpmd::saturatingAdd(size, ofOp(&nested));
    return size;
  }
};
} // namespace

LogicalResult mlir::mpmd::checkInlinedSize(ModuleOp module, StringRef kind, StringRef option,
                                           function_ref<bool(Operation *)> isCall,
                                           uint64_t maxOps) {
  if (maxOps == 0)
    return success();
  SymbolTable symbols(module);
  InlinedSizes sizes{symbols, isCall};
  for (func::FuncOp func : module.getOps<func::FuncOp>()) {
    uint64_t size = sizes.ofFunction(func);
    if (size <= maxOps)
      continue;
    Operation *firstCall = nullptr;
    func.walk([&](Operation *op) {
      if (!firstCall && isCall(op))
        firstCall = op;
    });
    if (!firstCall)
      continue; // large without calls: not ours to cap
    return firstCall->emitError()
           << "inlining the " << kind << " calls of @" << func.getSymName() << " would make it "
           << ::mpmd::describeSize(size)
           << " ops, over the limit of " << maxOps << " (option " << option
           << "): call functions fewer times (calls of calls multiply), or raise the limit";
  }
  return success();
}

namespace {

/// Erases the private functions of `module` that nothing references, until
/// none is left (erasing one may leave another unreferenced). A reference is
/// any symbol reference attribute anywhere in the module whose root is the
/// function's name: an over-approximation of its uses (a reference nested
/// in another symbol table counts too), so a function is only erased when
/// it certainly has no use. Unlike `SymbolTable::getSymbolUses`, an op that
/// may be an unknown symbol table (an unregistered op with a region, e.g.
/// `stablehlo.reduce`) does not stop the search: its references are counted
/// like any other.
void eraseUnreferencedPrivateFunctions(ModuleOp module) {
  llvm::DenseMap<StringAttr, int64_t> useCount;
  llvm::DenseMap<Operation *, SmallVector<StringAttr>> rootsUsedIn; // top-level op -> uses
  Block *body = module.getBody();
  for (Operation &top : *body)
    top.walk([&](Operation *op) {
      op->getAttrDictionary().walk([&](SymbolRefAttr ref) {
        StringAttr root = ref.getRootReference();
        ++useCount[root];
        rootsUsedIn[&top].push_back(root);
      });
    });
  for (bool erased = true; erased;) {
    erased = false;
    for (func::FuncOp func : llvm::make_early_inc_range(module.getOps<func::FuncOp>())) {
      if (!func.isPrivate() || useCount.lookup(func.getSymNameAttr()) != 0)
        continue;
      for (StringAttr root : rootsUsedIn.lookup(func))
        --useCount[root];
      rootsUsedIn.erase(func);
      func.erase();
      erased = true;
    }
  }
}

/// Whether `op` lies in a private function of `module`.
bool inPrivateFunction(ModuleOp module, Operation *op) {
  auto func = dyn_cast_or_null<func::FuncOp>(module.getBody()->findAncestorOpInBlock(*op));
  return func && func.isPrivate();
}

} // namespace

LogicalResult mlir::mpmd::inlineSingleBlockCallees(
    ModuleOp module, StringRef kind, function_ref<SmallVector<Operation *>()> collect,
    function_ref<void(Operation *, Operation *)> onClone) {
  SymbolTable symbols(module);
  auto calleeOf = [](Operation *call) {
    return call->getAttrOfType<FlatSymbolRefAttr>("callee").getValue();
  };
  // A chain of calls deeper than the number of functions is recursion.
  int64_t maxRounds = std::distance(module.getOps<func::FuncOp>().begin(),
                                    module.getOps<func::FuncOp>().end()) + 1;
  // Top-down: the calls of the public functions first, so that a callee's
  // body is copied where it is called, not first into private callers that
  // end up unreferenced (a helper called by each of M per-microbatch
  // wrappers would otherwise be inlined M times into dead wrappers). Calls
  // in private functions that are still referenced once the others are
  // gone are inlined last.
  bool onlyPublic = true;
  for (int64_t round = 0;; ++round) {
    SmallVector<Operation *> calls = collect();
    if (calls.empty())
      break;
    if (onlyPublic) {
      SmallVector<Operation *> outer = llvm::to_vector(llvm::make_filter_range(
          calls, [&](Operation *call) { return !inPrivateFunction(module, call); }));
      if (outer.empty()) {
        onlyPublic = false;
        eraseUnreferencedPrivateFunctions(module);
        round = -1; // the chains left start afresh
        continue;
      }
      calls = std::move(outer);
    }
    if (round >= maxRounds)
      return calls.front()->emitError() << "recursive " << kind << " @" << calleeOf(calls.front())
                                        << " cannot be inlined";
    for (Operation *call : calls) {
      auto callee = symbols.lookup<func::FuncOp>(calleeOf(call));
      if (!callee || callee.isExternal())
        return call->emitError() << "cannot inline " << kind << " @" << calleeOf(call)
                                 << ": no function body in the module";
      if (!llvm::hasSingleElement(callee.getBody()))
        return call->emitError() << "cannot inline " << kind << " @" << calleeOf(call)
                                 << ": its body has more than one block";
      Block &body = callee.getBody().front();
      IRMapping mapping;
      mapping.map(body.getArguments(), call->getOperands());
      OpBuilder builder(call);
      for (Operation &op : body.without_terminator())
        onClone(call, builder.clone(op, mapping));
      for (auto [result, returned] :
           llvm::zip(call->getResults(), body.getTerminator()->getOperands()))
        result.replaceAllUsesWith(mapping.lookupOrDefault(returned));
      call->erase();
    }
  }
  eraseUnreferencedPrivateFunctions(module);
  return success();
}
