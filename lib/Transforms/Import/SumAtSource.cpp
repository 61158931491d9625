//===- SumAtSource.cpp - sum transferred terms before they cross ----------===//
//
// A tied weight's gradient has a term on each mesh that uses the weight; the
// terms meet in an unlabelled add, accumulated over microbatches. Summing the
// terms sent from one mesh on that mesh first makes the sum cross once.
//
//===----------------------------------------------------------------------===//

#include "Common/PassBase.h"
#include "Common/StableHloOps.h"
#include "mpmd/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_SUMATSOURCEPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

/// Whether `fragment` is an inferred fragment computing `a + b` of its two
/// operands and nothing else.
bool isAddFragment(FragmentOp fragment) {
  if (fragment.isUserFragment() || fragment.getNumOperands() != 2 ||
      fragment.getNumResults() != 1)
    return false;
  Block &body = fragment.getRegion().front();
  if (!llvm::hasNItems(body, 2))
    return false;
  Operation &add = body.front();
  if (add.getName().getStringRef() != "stablehlo.add" || add.getNumOperands() != 2 ||
      add.getNumResults() != 1 || add.getNumRegions() != 0)
    return false;
  auto args = body.getArguments();
  bool direct = add.getOperand(0) == args[0] && add.getOperand(1) == args[1];
  bool swapped = add.getOperand(0) == args[1] && add.getOperand(1) == args[0];
  Operation *ret = body.getTerminator();
  return (direct || swapped) && ret->getNumOperands() == 1 &&
         ret->getOperand(0) == add.getResult(0);
}

/// The add fragment that is the only user of `v`, on `mesh`, or null.
FragmentOp soleAddUser(Value v, StringRef mesh) {
  if (!v.hasOneUse())
    return {};
  auto user = dyn_cast<FragmentOp>(*v.getUsers().begin());
  return user && user.getMeshName() == mesh && isAddFragment(user) ? user : FragmentOp();
}

/// A transferred term of a tree: the transfer and the add that uses it.
struct Term {
  TransferOp transfer;
  FragmentOp add;
  unsigned operand; // which operand of `add` the transfer is
};

class SumAtSourcePass : public MpmdPass<SumAtSourcePass, impl::SumAtSourcePassBase> {
  /// Collects the transferred leaves of the add tree made of `add` and,
  /// recursively, the add fragments on its mesh whose only use is it. An add
  /// of two transfers contributes only its first as a term.
  void collect(FragmentOp add, SmallVectorImpl<Term> &terms) {
    bool termHere = false;
    for (auto [i, v] : llvm::enumerate(add.getOperands())) {
      Operation *def = v.getDefiningOp();
      if (auto inner = dyn_cast_or_null<FragmentOp>(def)) {
        if (isAddFragment(inner) && soleAddUser(v, inner.getMeshName()) == add)
          collect(inner, terms);
      } else if (auto transfer = dyn_cast_or_null<TransferOp>(def)) {
        if (!termHere && transfer->getBlock() == add->getBlock() && transfer->hasOneUse()) {
          terms.push_back({transfer, add, static_cast<unsigned>(i)});
          termHere = true;
        }
      }
    }
  }

  /// Sums the values of `terms` (all sent from one mesh, of one type, into
  /// the tree rooted at `root`) on their mesh and sends the sum once.
  void sumAtSource(FragmentOp root, SmallVector<Term> terms) {
    llvm::sort(terms, [](Term a, Term b) {
      return a.transfer->isBeforeInBlock(b.transfer);
    });
    // On the source mesh: r0 = 0, rk = r(k-1) + yk, each add where the
    // transfer of yk is (both exist there). Starting from zeros gives every
    // microbatch's term the same add after it, which then merges into the
    // fragment that computes the term, as an accumulator's add does.
    Value sum = zerosLike(Term(terms.front()));
    for (Term term : terms) {
      OpBuilder builder(term.transfer);
      auto add = cast<FragmentOp>(builder.clone(*term.add.getOperation()));
      add->setOperands({sum, term.transfer.getTensor()});
      add->getResult(0).setType(sum.getType());
      add.setMeshName(cast<MeshTensorType>(sum.getType()).getMeshName());
      sum = add->getResult(0);
    }
    // After the root: its value plus the sum, sent once; the root's users
    // take that instead.
    Value rootValue = root->getResult(0);
    OpBuilder builder(root->getContext());
    builder.setInsertionPointAfter(root);
    Term last = terms.back();
    auto transfer = TransferOp::create(builder, last.transfer.getLoc(),
                                       last.transfer.getType(), sum);
    auto total = cast<FragmentOp>(builder.clone(*root.getOperation()));
    total->setOperands({rootValue, transfer.getResult()});
    rootValue.replaceAllUsesExcept(total->getResult(0), total);
    // The receiving mesh's adds drop their transferred terms.
    for (Term term : terms) {
      term.add->getResult(0).replaceAllUsesWith(term.add->getOperand(1 - term.operand));
      term.add->erase();
      term.transfer->erase();
    }
  }

  /// An inferred fragment on the mesh of `term`'s transferred value, before
  /// its transfer, returning zeros of its type.
  Value zerosLike(Term term) {
    Value y = term.transfer.getTensor();
    auto local = cast<RankedTensorType>(
        term.add.getRegion().front().getArgument(term.operand).getType());
    OpBuilder builder(term.transfer);
    auto fragment = FragmentOp::create(builder,
        term.transfer.getLoc(), TypeRange{y.getType()}, ValueRange{}, builder.getArrayAttr({}),
        builder.getStringAttr(cast<MeshTensorType>(y.getType()).getMeshName()),
        /*stage_id=*/nullptr, /*in_shardings=*/nullptr, /*out_shardings=*/nullptr);
    for (NamedAttribute attr : term.add->getDiscardableAttrs())
      fragment->setAttr(attr.getName(), attr.getValue());
    Block *body = builder.createBlock(&fragment.getRegion());
    Value zeros = createStableHloConstant(builder, term.transfer.getLoc(),
                                          cast<ElementsAttr>(builder.getZeroAttr(local)));
    builder.setInsertionPointToEnd(body);
    ReturnOp::create(builder, term.transfer.getLoc(), zeros);
    return fragment->getResult(0);
  }

public:
  void runOnFunction(func::FuncOp func, TopologyAttr) {
    // Roots: add fragments whose result is not the sole input of another add
    // on their mesh (the top of a tree).
    SmallVector<FragmentOp> roots;
    func.walk([&](FragmentOp fragment) {
      if (isAddFragment(fragment) && !soleAddUser(fragment->getResult(0), fragment.getMeshName()))
        roots.push_back(fragment);
    });
    for (FragmentOp root : roots) {
      SmallVector<Term> terms;
      collect(root, terms);
      // Per source mesh, in first-seen order; a mix of types is left alone.
      llvm::MapVector<StringRef, SmallVector<Term>> bySource;
      for (Term term : terms)
        bySource[cast<MeshTensorType>(term.transfer.getTensor().getType()).getMeshName()]
            .push_back(term);
      for (auto &[source, group] : bySource) {
        Type type = Term(group.front()).transfer.getTensor().getType();
        if (group.size() < 2 || llvm::any_of(group, [&](Term t) {
              return t.transfer.getTensor().getType() != type;
            }))
          continue;
        sumAtSource(root, group);
        break; // (the tree changed: one source mesh per tree)
      }
    }
  }
};

} // namespace
} // namespace mlir::mpmd
