//===- MergeTransfers.cpp - small transfers between two fragments as one ---===//
//
// Every transfer is a message between meshes with a fixed cost however
// small it is. The small values (at most `max-elements` elements, one
// element type, no sharding or memory kind) that one fragment sends to one
// fragment of another mesh are sent as one: the producer also returns them
// flattened and concatenated, one `mpmd.transfer {concat_transfer}` moves
// that buffer, and the consumer slices and reshapes them back in place of
// the block arguments that received the separate transfers. The separate
// transfers, results and operands are left as they are, for
// -mpmd-fragment-dce to drop.
//
//===----------------------------------------------------------------------===//

#include "Common/PackValues.h"
#include "Common/PassBase.h"
#include "mpmd/Dialect/MpmdAttrNames.h"
#include "mpmd/Compat/Passes.h"

#include "llvm/ADT/MapVector.h"

namespace mlir::mpmd {
#define GEN_PASS_DEF_MERGETRANSFERSPASS
#include "mpmd/Compat/Passes.h.inc"

namespace {

/// The transfers one producer sends to one consumer, of one type.
struct Group {
  FragmentOp consumer;
  MeshTensorType type; // Of each transfer's result.
  SmallVector<TransferOp> transfers; // Each once.
};

class MergeTransfersPass : public MpmdPass<MergeTransfersPass, impl::MergeTransfersPassBase> {
public:
  using MpmdPass::MpmdPass;

  void runOnFunction(func::FuncOp func, TopologyAttr) {
    for (FragmentOp producer :
         llvm::make_early_inc_range(func.getBody().front().getOps<FragmentOp>()))
      if (!hasPositionalAttrs(producer))
        merge(producer);
  }

  /// Whether `value`, of a fragment or a transfer, is small enough to merge.
  bool small(Value value) {
    RankedTensorType type = packableType(value);
    return type && type.getNumElements() <= maxElements;
  }

  /// The groups of `producer`, in the order of its results and their uses.
  SmallVector<Group> groups(FragmentOp producer) {
    llvm::MapVector<std::pair<Operation *, Type>, Group> byKey;
    Block *block = producer->getBlock();
    for (OpResult result : producer->getResults()) {
      if (!small(result))
        continue;
      for (Operation *user : result.getUsers()) {
        auto transfer = dyn_cast<TransferOp>(user);
        if (!transfer || !small(transfer.getResult()))
          continue;
        for (Operation *reader : transfer->getUsers()) {
          auto consumer = dyn_cast<FragmentOp>(reader);
          if (!consumer || consumer->getBlock() != block || hasPositionalAttrs(consumer))
            continue;
          Group &group = byKey[{consumer, transfer.getType()}];
          group.consumer = consumer;
          group.type = cast<MeshTensorType>(transfer.getType());
          if (!llvm::is_contained(group.transfers, transfer))
            group.transfers.push_back(transfer);
        }
      }
    }
    SmallVector<Group> out;
    for (auto &[key, group] : byKey)
      if (group.transfers.size() > 1)
        out.push_back(std::move(group));
    return out;
  }

  void merge(FragmentOp producer) {
    SmallVector<Group> found = groups(producer);
    if (found.empty())
      return;
    // The producer returns each group's values packed, after its results.
    Operation *terminator = producer.getRegion().front().getTerminator();
    OpBuilder b(terminator);
    SmallVector<Value> packed;
    SmallVector<Type> packedTypes;
    for (Group &group : found) {
      // Members in the order of the producer's results.
      llvm::sort(group.transfers, [](TransferOp x, TransferOp y) {
        return cast<OpResult>(x.getTensor()).getResultNumber() <
               cast<OpResult>(y.getTensor()).getResultNumber();
      });
      SmallVector<Value> members;
      for (TransferOp transfer : group.transfers)
        members.push_back(
            terminator->getOperand(cast<OpResult>(transfer.getTensor()).getResultNumber()));
      packed.push_back(packValues(b, producer.getLoc(), members));
      packedTypes.push_back(MeshTensorType::get(producer.getContext(), producer.getMeshName(),
                                                cast<RankedTensorType>(packed.back().getType())));
    }
    unsigned first = producer.getNumResults();
    producer = appendFragmentResults(producer, packed, packedTypes);
    // One transfer per group, each right after the producer (so the last
    // group's comes first, as Shardy's pass orders them); each consumer
    // takes it last and unpacks the members where their transfers arrived.
    for (auto [k, group] : llvm::enumerate(found)) {
      b.setInsertionPointAfter(producer);
      Value source = producer.getResult(first + k);
      auto target = MeshTensorType::get(
          producer.getContext(), group.type.getMeshName(),
          cast<MeshTensorType>(source.getType()).getGlobalTensorType());
      auto merged = TransferOp::create(b, producer.getLoc(), target, source);
      merged->setAttr(kConcatTransferAttr, b.getUnitAttr());
      unpack(group, merged);
    }
  }

  void unpack(const Group &group, TransferOp merged) {
    FragmentOp consumer = group.consumer;
    Block &body = consumer.getRegion().front();
    BlockArgument whole = body.addArgument(
        cast<MeshTensorType>(merged.getType()).getGlobalTensorType(), merged.getLoc());
    consumer->insertOperands(consumer->getNumOperands(), merged.getResult());
    OpBuilder b(&body, body.begin());
    SmallVector<Type> types(group.transfers.size(), group.type.getGlobalTensorType());
    // Each block argument that received a member reads its slice (one
    // slice per argument, as the consumer may take a member twice; unread
    // ones are -mpmd-fragment-dce's).
    for (BlockArgument arg : body.getArguments().drop_back()) {
      auto transfer = consumer.getOperand(arg.getArgNumber()).getDefiningOp<TransferOp>();
      if (!transfer || !llvm::is_contained(group.transfers, transfer))
        continue;
      unsigned index = llvm::find(group.transfers, transfer) - group.transfers.begin();
      arg.replaceAllUsesWith(unpackValue(b, consumer.getLoc(), whole, types, index));
    }
  }
};

} // namespace
} // namespace mlir::mpmd
