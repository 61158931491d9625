//===- PackFragmentValues.cpp - hand values over as one buffer --------------===//
//
// A fragment call costs host time per buffer it takes and makes, and a
// pipeline passes many small buffers from one call to the next on a mesh:
// a microbatch's gradient accumulators from one backward to the next, the
// activations a forward saves for its backward. This pass packs the values
// that one fragment hands to one other fragment of its mesh (and only to it)
// into one 1-D buffer per element type: the producer flattens and
// concatenates them, the consumer slices and reshapes them back. Splat
// constants the runtime makes for a fragment (`mpmd.constant`, donated: the
// zeros the first microbatch's accumulators start from) are packed the same
// way, so that the first microbatch's fragment keeps the body of the others.
// See Passes.td.
//
//===----------------------------------------------------------------------===//

#include "Common/PackValues.h"
#include "Common/PassBase.h"
#include "Common/StructuralKey.h"
#include "mpmd/Dialect/MpmdAttrNames.h"
#include "mpmd/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringMap.h"

#include <map>
#include <set>

namespace mlir::mpmd {
#define GEN_PASS_DEF_PACKFRAGMENTVALUESPASS
#include "mpmd/Transforms/Passes.h.inc"

namespace {

/// A splat `mpmd.constant` argument of `func` that the caller may consume
/// (the runtime makes it afresh for each call), or null.
DenseElementsAttr donatedSplatConstant(func::FuncOp func, BlockArgument arg) {
  unsigned i = arg.getArgNumber();
  auto value = func.getArgAttrOfType<DenseElementsAttr>(i, kConstantArgAttr);
  auto donor = func.getArgAttrOfType<BoolAttr>(i, kBufferDonorAttr);
  if (!value || !value.isSplat() || !donor || !donor.getValue())
    return {};
  return value;
}

/// Operands of one consumer that come from one source and are packed into
/// one buffer.
struct Group {
  FragmentOp consumer;
  /// The producing fragment (as the pass found it), or null for constants.
  Operation *producer = nullptr;
  /// Constants: the splat value every member has (as an attribute).
  Attribute splat;
  Type element;
  /// The members' operand positions in packing order: the producer's
  /// result order, or (constants) operand order until `runOnFunction` aligns
  /// it with a sibling's.
  SmallVector<unsigned> positions;
  /// The producer's result numbers of the members, ascending.
  SmallVector<unsigned> results;
  bool alive = true;

  /// The members' positions as a set (sorted).
  SmallVector<unsigned> positionSet() const {
    SmallVector<unsigned> set(positions);
    llvm::sort(set);
    return set;
  }
};

class PackFragmentValuesPass
    : public MpmdPass<PackFragmentValuesPass, impl::PackFragmentValuesPassBase> {
public:
  using MpmdPass::MpmdPass;

  void runOnFunction(func::FuncOp func, TopologyAttr topology) {
    Block &block = func.getBody().front();
    // Fragments with one body share one program: siblings. Packing must
    // treat them alike, or it would split a program in two.
    llvm::StringMap<unsigned> classIds;
    llvm::DenseMap<Operation *, unsigned> classOf;
    SmallVector<unsigned> classSize;
    for (FragmentOp fragment : block.getOps<FragmentOp>()) {
      auto [it, inserted] =
          classIds.try_emplace(blockKey(fragment.getRegion().front()), classSize.size());
      if (inserted)
        classSize.push_back(0);
      classOf[fragment] = it->second;
      ++classSize[it->second];
    }
    std::vector<Group> groups;
    for (FragmentOp consumer : block.getOps<FragmentOp>()) {
      MeshAttr mesh = topology.getMesh(consumer.getMeshName());
      if (!mesh || mesh.getNumDevices() != 1 || hasPositionalAttrs(consumer))
        continue;
      for (Group &group : groupsOf(func, consumer))
        if (group.positions.size() >= minValues)
          groups.push_back(std::move(group));
    }
    keepWhatSiblingsShare(groups, classOf, classSize);
    // Constants are a splat: any order of the members is the same buffer;
    // take the order of a sibling that packs the same operands from a
    // producer, so that both keep one body.
    std::map<std::pair<unsigned, SmallVector<unsigned>>, SmallVector<unsigned>> orders;
    for (const Group &group : groups)
      if (group.alive && group.producer)
        orders[{classOf[group.consumer], group.positionSet()}] = group.positions;
    for (Group &group : groups)
      if (group.alive && !group.producer)
        if (auto it = orders.find({classOf[group.consumer], group.positionSet()});
            it != orders.end())
          group.positions = it->second;

    llvm::BitVector erase(func.getNumArguments());
    for (size_t i = 0; i < groups.size();) {
      FragmentOp consumer = groups[i].consumer;
      llvm::BitVector drop(consumer.getNumOperands());
      for (; i < groups.size() && groups[i].consumer == consumer; ++i) {
        Group &group = groups[i];
        if (!group.alive)
          continue;
        // (Read now: packing an earlier group may have replaced it.)
        Operation *producer = consumer.getOperand(group.positions.front()).getDefiningOp();
        Value packed = producer ? packResults(cast<FragmentOp>(producer), consumer, group)
                                : packConstants(func, consumer, group, erase);
        unpack(consumer, group, packed, drop);
      }
      drop.resize(consumer.getNumOperands());
      consumer.getRegion().front().eraseArguments(drop);
      consumer->eraseOperands(drop);
    }
    erase.resize(func.getNumArguments());
    (void)func.eraseArguments(erase);
  }

private:
  /// Keeps the groups that every sibling of their consumer and of their
  /// producer has too (until nothing changes): every sibling of the consumer
  /// packs the same operands (from producers: in the same order), and every
  /// sibling of the producer packs the same results.
  static void keepWhatSiblingsShare(std::vector<Group> &groups,
                                    llvm::DenseMap<Operation *, unsigned> &classOf,
                                    ArrayRef<unsigned> classSize) {
    using Members = SmallVector<unsigned>;
    for (bool changed = true; changed;) {
      changed = false;
      // (class, operand set) -> the consumers that pack it, producer orders.
      std::map<std::pair<unsigned, Members>, std::pair<llvm::DenseSet<Operation *>,
                                                       std::set<Members>>> byConsumer;
      // (class, result set) -> the producers that pack it.
      std::map<std::pair<unsigned, Members>, llvm::DenseSet<Operation *>> byProducer;
      for (const Group &group : groups) {
        if (!group.alive)
          continue;
        auto &entry = byConsumer[{classOf[group.consumer], group.positionSet()}];
        entry.first.insert(group.consumer);
        if (group.producer) {
          entry.second.insert(group.positions);
          byProducer[{classOf[group.producer], group.results}].insert(group.producer);
        }
      }
      for (Group &group : groups) {
        if (!group.alive)
          continue;
        unsigned consumerClass = classOf[group.consumer];
        auto &entry = byConsumer[{consumerClass, group.positionSet()}];
        bool shared = entry.first.size() == classSize[consumerClass] && entry.second.size() <= 1;
        if (shared && group.producer) {
          unsigned producerClass = classOf[group.producer];
          shared = byProducer[{producerClass, group.results}].size() == classSize[producerClass];
        }
        if (!shared) {
          group.alive = false;
          changed = true;
        }
      }
    }
  }

  /// The groups of `consumer`'s operands the pass may pack, in the order of
  /// their first member.
  SmallVector<Group> groupsOf(func::FuncOp func, FragmentOp consumer) {
    llvm::MapVector<std::tuple<Operation *, Attribute, Type>, Group> groups;
    for (auto [i, operand] : llvm::enumerate(consumer.getOperands())) {
      RankedTensorType type = packableType(operand);
      if (!type || !operand.hasOneUse())
        continue;
      if (maxValueBytes > 0 &&
          type.getNumElements() * ((type.getElementTypeBitWidth() + 7) / 8) >
              static_cast<int64_t>(maxValueBytes))
        continue;
      Operation *producer = operand.getDefiningOp();
      Attribute splat;
      if (auto fragment = dyn_cast_or_null<FragmentOp>(producer)) {
        if (hasPositionalAttrs(fragment))
          continue;
      } else if (auto arg = dyn_cast<BlockArgument>(operand);
                 arg && arg.getOwner() == &func.getBody().front()) {
        DenseElementsAttr value = donatedSplatConstant(func, arg);
        if (!value)
          continue;
        splat = value.getSplatValue<Attribute>();
      } else {
        continue;
      }
      Group &group = groups[{producer, splat, type.getElementType()}];
      group.consumer = consumer;
      group.producer = producer;
      group.splat = splat;
      group.element = type.getElementType();
      group.positions.push_back(i);
      if (producer)
        group.results.push_back(cast<OpResult>(operand).getResultNumber());
    }
    SmallVector<Group> result;
    for (auto &entry : groups) {
      Group &group = entry.second;
      if (group.producer) {  // members in the producer's result order
        SmallVector<std::pair<unsigned, unsigned>> byResult;
        for (auto [r, p] : llvm::zip(group.results, group.positions))
          byResult.push_back({r, p});
        llvm::sort(byResult);
        for (auto [k, rp] : llvm::enumerate(byResult)) {
          group.results[k] = rp.first;
          group.positions[k] = rp.second;
        }
      }
      result.push_back(std::move(group));
    }
    return result;
  }

  /// Total elements of the members of `group` (operands of `consumer`).
  static int64_t packedSize(FragmentOp consumer, const Group &group) {
    int64_t size = 0;
    for (unsigned i : group.positions)
      size += packableType(consumer.getOperand(i)).getNumElements();
    return size;
  }

  static MeshTensorType packedType(FragmentOp consumer, const Group &group) {
    auto flat = RankedTensorType::get({packedSize(consumer, group)}, group.element);
    return MeshTensorType::get(consumer.getContext(), consumer.getMeshName(), flat);
  }

  /// Replaces `producer` by a fragment that returns the members of `group`
  /// (its results, read by `consumer` alone) as one result, the packed
  /// buffer, last, in the group's order; returns it. The consumer's member
  /// operands are set to it until `unpack` and the caller drop them.
  Value packResults(FragmentOp producer, FragmentOp consumer, const Group &group) {
    Operation *terminator = producer.getTerminator();
    OpBuilder b(terminator);
    Location loc = producer.getLoc();
    SmallVector<Value> members;
    llvm::BitVector drop(producer.getNumResults());
    for (unsigned i : group.positions) {
      auto result = cast<OpResult>(consumer.getOperand(i));
      drop.set(result.getResultNumber());
      members.push_back(terminator->getOperand(result.getResultNumber()));
    }
    MeshTensorType packed = packedType(consumer, group);
    Value joined = packValues(b, loc, members);
    // The new fragment: the results that stay, then the packed one.
    SmallVector<Type> types;
    SmallVector<unsigned> kept;
    for (unsigned i = 0; i < producer.getNumResults(); ++i)
      if (!drop.test(i)) {
        types.push_back(producer.getResult(i).getType());
        kept.push_back(i);
      }
    types.push_back(packed);
    terminator->eraseOperands(drop);
    terminator->insertOperands(terminator->getNumOperands(), joined);
    b.setInsertionPoint(producer);
    auto replacement = FragmentOp::create(b, producer.getLoc(), types, producer.getOperands(),
                                          producer->getAttrs());
    replacement.getRegion().takeBody(producer.getRegion());
    for (auto [newIndex, oldIndex] : llvm::enumerate(kept))
      producer.getResult(oldIndex).replaceAllUsesWith(replacement.getResult(newIndex));
    Value packedValue = replacement.getResults().back();
    // (Until the caller drops them.)
    for (unsigned i : group.positions)
      consumer->setOperand(i, packedValue);
    producer.erase();
    return packedValue;
  }

  /// Makes a new donated splat `mpmd.constant` argument of `func` holding
  /// the members of `group` packed, marks the members' arguments for
  /// erasure (each has one use, the consumer) and returns the new argument.
  Value packConstants(func::FuncOp func, FragmentOp consumer, const Group &group,
                      llvm::BitVector &erase) {
    MLIRContext *ctx = func.getContext();
    MeshTensorType packed = packedType(consumer, group);
    for (unsigned i : group.positions) {
      unsigned arg = cast<BlockArgument>(consumer.getOperand(i)).getArgNumber();
      erase.resize(std::max<unsigned>(erase.size(), arg + 1));
      erase.set(arg);
    }
    NamedAttrList attrs;
    attrs.set(kConstantArgAttr, DenseElementsAttr::get(packed.getGlobalTensorType(), group.splat));
    attrs.set(kBufferDonorAttr, BoolAttr::get(ctx, true));
    unsigned index = func.getNumArguments();
    (void)func.insertArgument(index, packed, attrs.getDictionary(ctx), consumer.getLoc());
    return func.getArgument(index);
  }

  /// Makes `consumer` read `packedValue` (one new operand, last) in place of
  /// the members of `group`: its body slices and reshapes the members back;
  /// the members' positions are set in `drop` (for the caller to erase).
  void unpack(FragmentOp consumer, const Group &group, Value packedValue,
              llvm::BitVector &drop) {
    Block &body = consumer.getRegion().front();
    OpBuilder b(&body, body.begin());
    Location loc = consumer.getLoc();
    auto packedTensor = cast<MeshTensorType>(packedValue.getType()).getGlobalTensorType();
    BlockArgument whole = body.addArgument(packedTensor, loc);
    consumer->insertOperands(consumer->getNumOperands(), packedValue);
    SmallVector<Type> types;
    for (unsigned i : group.positions)
      types.push_back(body.getArgument(i).getType());
    for (auto [i, value] : llvm::zip(group.positions, unpackValues(b, loc, whole, types))) {
      body.getArgument(i).replaceAllUsesWith(value);
      drop.set(i);
    }
  }
};

} // namespace
} // namespace mlir::mpmd
