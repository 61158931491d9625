//===- StructuralKey.cpp - IR structure as a comparable key ------------------===//

#include "Common/StructuralKey.h"

#include "mlir/IR/Region.h"
#include "llvm/ADT/DenseMap.h"

using namespace mlir;
using namespace mlir::mpmd;

namespace {

/// Writes the tokens of a key: pointers of uniqued objects (op names,
/// attributes, types), counts, and value and block numbers.
class KeyWriter {
public:
  explicit KeyWriter(PropertiesOverride properties) : properties(properties) {}

  std::string finish() && { return std::move(key); }

  /// Numbers the values and blocks defined in `op`'s regions (and its
  /// results when `withResults`), in program order.
  void number(Operation &op, bool withResults) {
    if (withResults)
      for (Value v : op.getResults())
        values.try_emplace(v, values.size());
    for (Region &region : op.getRegions())
      numberRegion(region);
  }
  void numberBlock(Block &block) {
    blocks.try_emplace(&block, blocks.size());
    for (BlockArgument arg : block.getArguments())
      values.try_emplace(arg, values.size());
    for (Operation &op : block)
      number(op, /*withResults=*/true);
  }

  void writeOp(Operation &op) {
    put(op.getName().getAsOpaquePointer());
    Attribute props = properties ? properties(&op) : Attribute();
    put((props ? props : op.getPropertiesAsAttribute()).getAsOpaquePointer());
    put(op.getRawDictionaryAttrs().getAsOpaquePointer());
    put(op.getNumOperands());
    for (Value v : op.getOperands()) {
      auto it = values.find(v);
      if (it != values.end()) {
        put(it->second);
      } else { // defined outside what is keyed: that very value
        put(~uint64_t(0));
        put(v.getAsOpaquePointer());
      }
    }
    put(op.getNumResults());
    for (Type t : op.getResultTypes())
      put(t.getAsOpaquePointer());
    put(op.getNumSuccessors());
    for (Block *successor : op.getSuccessors()) {
      auto it = blocks.find(successor);
      put(it != blocks.end() ? it->second : ~uint64_t(0));
    }
    put(op.getNumRegions());
    for (Region &region : op.getRegions()) {
      put(std::distance(region.begin(), region.end()));
      for (Block &block : region)
        writeBlock(block, /*withArguments=*/true);
    }
  }

  void writeBlock(Block &block, bool withArguments) {
    if (withArguments) {
      put(block.getNumArguments());
      for (BlockArgument arg : block.getArguments())
        put(arg.getType().getAsOpaquePointer());
    }
    put(std::distance(block.begin(), block.end()));
    for (Operation &op : block)
      writeOp(op);
  }

private:
  void numberRegion(Region &region) {
    for (Block &block : region)
      numberBlock(block);
  }

  void put(const void *p) { put(reinterpret_cast<uintptr_t>(p)); }
  void put(uint64_t v) { key.append(reinterpret_cast<const char *>(&v), sizeof(v)); }

  PropertiesOverride properties;
  llvm::DenseMap<Value, uint64_t> values;
  llvm::DenseMap<Block *, uint64_t> blocks;
  std::string key;
};

} // namespace

std::string mlir::mpmd::blockKey(Block &block, bool withArguments,
                                 PropertiesOverride properties) {
  KeyWriter writer(properties);
  writer.numberBlock(block);
  writer.writeBlock(block, withArguments);
  return std::move(writer).finish();
}

std::string mlir::mpmd::opKey(Operation *op, PropertiesOverride properties) {
  KeyWriter writer(properties);
  writer.number(*op, /*withResults=*/false);
  writer.writeOp(*op);
  return std::move(writer).finish();
}
