//===- Inline.cpp - inlining calls of single-block functions ----------------===//

#include "Common/Inline.h"

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
  llvm::DenseMap<Operation *, uint64_t> memo;
  llvm::DenseSet<Operation *> active;

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
  InlinedSizes sizes{symbols, isCall, {}, {}};
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

LogicalResult mlir::mpmd::inlineAllCalls(ModuleOp module, StringRef kind,
                                         function_ref<SmallVector<Operation *>()> collect,
                                         function_ref<void(Operation *, Operation *)> onClone) {
  SymbolTable symbols(module);
  auto calleeOf = [](Operation *call) {
    return call->getAttrOfType<FlatSymbolRefAttr>("callee").getValue();
  };
  // A chain of calls deeper than the number of functions is recursion.
  int64_t maxRounds = std::distance(module.getOps<func::FuncOp>().begin(),
                                    module.getOps<func::FuncOp>().end()) + 1;
  for (int64_t round = 0;; ++round) {
    SmallVector<Operation *> calls = collect();
    if (calls.empty())
      break;
    if (round == maxRounds)
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
  // Erase, in module order, the private functions that are known to be
  // unreferenced (erasing one may leave a later one unreferenced). This is
  // `SymbolTable::symbolKnownUseEmpty(func, module)` for each function, from
  // one walk of the module instead of one per function: a function is known
  // unreferenced when no symbol use in the module has its name as root and the
  // walk meets no op that may be an unknown symbol table (an unregistered op
  // with one region, e.g. `stablehlo.reduce`). With such an op, none is, and
  // none becomes so by erasing others (a function holding it is not erased).
  std::optional<SymbolTable::UseRange> uses = SymbolTable::getSymbolUses(&module.getBodyRegion());
  if (!uses)
    return success();
  llvm::DenseMap<StringAttr, int64_t> useCount;
  llvm::DenseMap<Operation *, SmallVector<StringAttr>> rootsUsedIn; // top-level op -> uses
  for (const SymbolTable::SymbolUse &use : *uses) {
    StringAttr root = use.getSymbolRef().getRootReference();
    ++useCount[root];
    rootsUsedIn[module.getBody()->findAncestorOpInBlock(*use.getUser())].push_back(root);
  }
  for (func::FuncOp func : llvm::make_early_inc_range(module.getOps<func::FuncOp>())) {
    if (!func.isPrivate() || useCount.lookup(func.getSymNameAttr()) != 0)
      continue;
    for (StringAttr root : rootsUsedIn.lookup(func))
      --useCount[root];
    func.erase();
  }
  return success();
}
