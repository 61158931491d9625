//===- CommonTests.cpp - unit tests of the passes' shared helpers -----------===//
//
// `mpmd-common-tests`: checks the helpers of lib/Transforms/Common (text
// option parsers and printers, structural keys, fragment queries, inlining,
// merging) and the mesh assignment analysis directly, without a pass around
// them. Each test prints `PASS name` or `FAIL name` with the failed checks;
// the tool exits with 1 when a check failed. Run by lit (common_tests.test)
// through `make test-lit`; `mpmd-common-tests NAME...` runs only the tests
// whose name starts with one of the NAMEs.
//
//===----------------------------------------------------------------------===//

#include "Common/Fragments.h"
#include "Common/InlineSingleBlockCallees.h"
#include "Common/MergeFragments.h"
#include "Common/StructuralKey.h"
#include "Common/TextOptions.h"
#include "Import/MeshAssignmentAnalysis.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <string>
#include <vector>

using namespace mlir;
using namespace mlir::mpmd;

namespace {

//===----------------------------------------------------------------------===//
// A minimal harness
//===----------------------------------------------------------------------===//

int failedChecks = 0;

/// Records a failed check (with the source line and what was checked).
void report(bool ok, const char *file, int line, const std::string &what) {
  if (ok)
    return;
  ++failedChecks;
  llvm::errs() << file << ":" << line << ": check failed: " << what << "\n";
}

#define CHECK(cond) report(static_cast<bool>(cond), __FILE__, __LINE__, #cond)
#define CHECK_EQ(a, b)                                                                           \
  do {                                                                                           \
    auto _a = (a);                                                                               \
    auto _b = (b);                                                                               \
    std::string _s;                                                                              \
    llvm::raw_string_ostream _os(_s);                                                            \
    _os << #a << " == " << #b << " (got '" << _a << "', expected '" << _b << "')";             \
    report(_a == _b, __FILE__, __LINE__, _s);                                                    \
  } while (0)

/// An MLIR context with mpmd and func, accepting the StableHLO ops of the
/// tests in generic form, that collects every diagnostic's message.
struct Context {
  MLIRContext ctx;
  std::vector<std::string> diagnostics;
  ScopedDiagnosticHandler handler;

  Context()
      : handler(&ctx, [this](Diagnostic &d) {
          diagnostics.push_back(d.str());
          return success();
        }) {
    ctx.loadDialect<MpmdDialect, func::FuncDialect>();
    ctx.allowUnregisteredDialects(true);
  }

  /// Emits errors at an unknown location (an EmitErrorFn).
  InFlightDiagnostic emitError() { return mlir::emitError(UnknownLoc::get(&ctx)); }

  /// Whether exactly one diagnostic was reported and it contains `text`;
  /// clears the diagnostics.
  bool onlyError(StringRef text) {
    bool ok = diagnostics.size() == 1 && StringRef(diagnostics.front()).contains(text);
    if (!ok) {
      llvm::errs() << "  expected one diagnostic containing '" << text << "', got "
                   << diagnostics.size() << ":\n";
      for (const std::string &d : diagnostics)
        llvm::errs() << "    " << d << "\n";
    }
    diagnostics.clear();
    return ok;
  }

  OwningOpRef<ModuleOp> parse(StringRef source) {
    OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(source, &ctx);
    if (!module) {
      ++failedChecks;
      llvm::errs() << "  the test's module does not parse\n";
    }
    return module;
  }
};

func::FuncOp lookupFunc(ModuleOp module, StringRef name) {
  return module.lookupSymbol<func::FuncOp>(name);
}

/// The ops of `func`'s body of type OpTy, in order.
template <typename OpTy> SmallVector<OpTy> opsOf(func::FuncOp func) {
  return llvm::to_vector(func.getBody().front().getOps<OpTy>());
}

std::string print(Operation *op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  op->print(os, OpPrintingFlags().printGenericOpForm());
  return s;
}

//===----------------------------------------------------------------------===//
// TextOptions
//===----------------------------------------------------------------------===//

void testNameAssignment() {
  Context c;
  auto emit = [&] { return c.emitError(); };
  auto parsed = parseNameAssignment({"stage0@m0", "dec@m1/3", "a@b@m2"}, emit);
  CHECK(succeeded(parsed));
  if (succeeded(parsed)) {
    CHECK_EQ(parsed->size(), size_t(3));
    CHECK_EQ((*parsed)[0].name, std::string("stage0"));
    CHECK_EQ((*parsed)[0].mesh, std::string("m0"));
    CHECK_EQ((*parsed)[0].stage, int64_t(-1));
    CHECK_EQ((*parsed)[1].mesh, std::string("m1"));
    CHECK_EQ((*parsed)[1].stage, int64_t(3));
    // The mesh follows the last '@': names may contain one.
    CHECK_EQ((*parsed)[2].name, std::string("a@b"));
    CHECK_EQ((*parsed)[2].mesh, std::string("m2"));
  }
  CHECK(c.diagnostics.empty());
  for (const char *bad : {"noat", "@m0", "x@"}) {
    CHECK(failed(parseNameAssignment({bad}, emit)));
    CHECK(c.onlyError(("malformed assignment entry '" + std::string(bad) + "'").c_str()));
  }
  for (const char *bad : {"x@m0/-1", "x@m0/s1", "x@m0/"}) {
    CHECK(failed(parseNameAssignment({"ok@m0", bad}, emit)));
    CHECK(c.onlyError("has an invalid stage: expected a non-negative integer"));
  }
}

void testIndexAssignment() {
  Context c;
  auto emit = [&] { return c.emitError(); };
  auto parsed = parseIndexAssignment({"0@m0", "12@m1"}, "input", emit);
  CHECK(succeeded(parsed));
  if (succeeded(parsed)) {
    CHECK_EQ(parsed->size(), size_t(2));
    CHECK_EQ((*parsed)[1].index, int64_t(12));
    CHECK_EQ((*parsed)[1].mesh, std::string("m1"));
  }
  for (const char *bad : {"a@m0", "-1@m0", "3@", "3"}) {
    CHECK(failed(parseIndexAssignment({bad}, "output", emit)));
    CHECK(c.onlyError(("malformed output assignment entry '" + std::string(bad) +
                       "': expected index@mesh")
                          .c_str()));
  }
}

void testUnitLines() {
  Context c;
  auto emit = [&] { return c.emitError(); };
  auto lines = parseUnitLines("@gpipe\nm0: F0 F1 . B0.s2  # a comment\nm1: W3; m2:", "schedule",
                              emit);
  CHECK(succeeded(lines));
  if (succeeded(lines)) {
    // The name line and the empty line of m2 say nothing.
    CHECK_EQ(lines->size(), size_t(2));
    const std::vector<::mpmd::Unit> &m0 = (*lines)[0];
    CHECK_EQ(m0.size(), size_t(3)); // `.` is an idle slot
    CHECK_EQ(m0[0].mesh, std::string("m0"));
    CHECK_EQ(m0[0].kind, std::string("F"));
    CHECK_EQ(m0[0].microbatch, int64_t(0));
    CHECK_EQ(m0[0].stage, int64_t(-1));
    CHECK_EQ(m0[2].kind, std::string("B"));
    CHECK_EQ(m0[2].stage, int64_t(2));
    CHECK_EQ((*lines)[1][0].mesh, std::string("m1"));
    CHECK_EQ((*lines)[1][0].kind, std::string("W"));
    CHECK_EQ((*lines)[1][0].microbatch, int64_t(3));
  }
  CHECK(failed(parseUnitLines("m0: F0\nm2:", "merge rule", emit, /*allowEmptyLines=*/false)));
  CHECK(c.onlyError("merge rule 'm2:' names no unit"));
  for (const char *bad : {"m0 F0", ": F0"}) {
    CHECK(failed(parseUnitLines(bad, "schedule", emit)));
    CHECK(c.onlyError("malformed schedule line"));
  }
  for (const char *bad : {"m0: X0", "m0: F", "m0: F-1", "m0: F1.s", "m0: F1.sx", "m0: F1.s-2"}) {
    CHECK(failed(parseUnitLines(bad, "schedule", emit)));
    CHECK(c.onlyError("in the schedule of mesh \"m0\": expected F<mb>, B<mb> or W<mb>"));
  }
}

void testUnitFormat() {
  Context c;
  auto emit = [&] { return c.emitError(); };
  ::mpmd::Unit f3{"m1", "F", 3, -1}, b0{"m1", "B", 0, 5}, w12{"m1", "W", 12, 0};
  CHECK_EQ(formatUnit(f3), std::string("F3"));
  CHECK_EQ(formatUnit(b0), std::string("B0.s5"));
  CHECK_EQ(formatUnit(w12), std::string("W12.s0"));
  // The stage is hidden when it is the mesh's index (the default stage).
  CHECK_EQ(formatUnit(b0, 5), std::string("B0"));
  CHECK_EQ(formatUnit(b0, 1), std::string("B0.s5"));
  CHECK_EQ(formatUnit(f3, 1), std::string("F3"));
  // What the printer writes, the parser reads back unchanged.
  std::vector<::mpmd::Unit> line = {f3, b0, w12};
  std::string text = formatUnitLine(line);
  auto parsed = parseUnitLines(text, "schedule", emit);
  CHECK(succeeded(parsed));
  if (succeeded(parsed) && parsed->size() == 1) {
    const std::vector<::mpmd::Unit> &back = parsed->front();
    CHECK_EQ(back.size(), line.size());
    for (size_t i = 0; i < std::min(back.size(), line.size()); ++i) {
      CHECK_EQ(back[i].mesh, line[i].mesh);
      CHECK_EQ(back[i].kind, line[i].kind);
      CHECK_EQ(back[i].microbatch, line[i].microbatch);
      CHECK_EQ(back[i].stage, line[i].stage);
    }
  } else {
    CHECK(false && "the printed line parses to one line");
  }
  CHECK(c.diagnostics.empty());
}

/// The entries of a list option: what MLIR's option parser hands the
/// assignment parsers for `a,b,c`.
std::vector<std::string> commaSeparated(StringRef text) {
  SmallVector<StringRef> parts;
  text.split(parts, ',');
  return std::vector<std::string>(parts.begin(), parts.end());
}

void testPrintersRoundTrip() {
  Context c;
  auto emit = [&] { return c.emitError(); };
  std::vector<::mpmd::MeshSpec> meshes = {{"m0", {{"data", 4}, {"model", 2}}}, {"m1", {}}};
  std::string topology = formatTopology(meshes);
  CHECK_EQ(topology, std::string("m0:data=4,model=2;m1:"));
  auto meshesBack = parseTopology(topology, emit);
  CHECK(succeeded(meshesBack) && meshesBack->size() == 2 &&
        (*meshesBack)[0].axes == meshes[0].axes && (*meshesBack)[1].axes.empty());

  std::vector<::mpmd::NameAssignment> names = {{"stage0", "m0", -1}, {"a@b", "m1", 3}};
  std::string assignment = formatNameAssignment(names);
  CHECK_EQ(assignment, std::string("stage0@m0,a@b@m1/3"));
  auto namesBack = parseNameAssignment(commaSeparated(assignment), emit);
  CHECK(succeeded(namesBack) && namesBack->size() == 2);
  if (succeeded(namesBack) && namesBack->size() == 2)
    for (size_t i = 0; i < 2; ++i)
      CHECK((*namesBack)[i].name == names[i].name && (*namesBack)[i].mesh == names[i].mesh &&
            (*namesBack)[i].stage == names[i].stage);

  std::vector<::mpmd::IndexAssignment> indices = {{0, "m1"}, {12, "m0"}};
  std::string inputs = formatIndexAssignment(indices);
  CHECK_EQ(inputs, std::string("0@m1,12@m0"));
  auto indicesBack = parseIndexAssignment(commaSeparated(inputs), "input", emit);
  CHECK(succeeded(indicesBack) && indicesBack->size() == 2 && (*indicesBack)[1].index == 12 &&
        (*indicesBack)[1].mesh == "m0");

  // A stage equal to its mesh's index in the topology is left out (it is
  // what the parser's -1 means); any other known stage is written.
  std::vector<std::vector<::mpmd::Unit>> lines = {
      {{"m1", "F", 0, 1}, {"m1", "B", 0, 3}}, {}, {{"m0", "W", 2, 0}}};
  CHECK_EQ(formatUnitLines(lines, meshes), std::string("m1: F0 B0.s3; m0: W2"));
  CHECK_EQ(formatUnitLines(lines), std::string("m1: F0.s1 B0.s3; m0: W2.s0"));
  auto linesBack = parseUnitLines(formatUnitLines(lines), "schedule", emit);
  CHECK(succeeded(linesBack) && linesBack->size() == 2 && (*linesBack)[0] == lines[0] &&
        (*linesBack)[1] == lines[2]);
  CHECK_EQ(formatUnitLines({}), std::string());
  CHECK(c.diagnostics.empty());
}

void testTopology() {
  Context c;
  auto emit = [&] { return c.emitError(); };
  auto meshes = parseTopology("m0:data=4,model=2; m1:", emit);
  CHECK(succeeded(meshes));
  if (succeeded(meshes)) {
    CHECK_EQ(meshes->size(), size_t(2));
    CHECK_EQ((*meshes)[0].name, std::string("m0"));
    CHECK_EQ((*meshes)[0].axes.size(), size_t(2));
    CHECK_EQ((*meshes)[0].axes[1].first, std::string("model"));
    CHECK_EQ((*meshes)[0].axes[1].second, int64_t(2));
    CHECK((*meshes)[1].axes.empty());
    TopologyAttr topology = buildTopology(&c.ctx, *meshes, emit);
    CHECK(topology);
    if (topology) {
      CHECK_EQ(topology.getMeshes().size(), size_t(2));
      CHECK_EQ(getMeshIndex(topology, "m1"), int64_t(1));
      CHECK_EQ(getMeshIndex(topology, "m2"), int64_t(-1));
    }
  }
  CHECK(failed(parseTopology("m0", emit)));
  CHECK(c.onlyError("malformed topology entry 'm0'"));
  for (const char *bad : {"m0:data", "m0:data=x", "m0:=4"}) {
    CHECK(failed(parseTopology(bad, emit)));
    CHECK(c.onlyError("of mesh \"m0\" in the topology: expected axis=size"));
  }
  // The attribute verifiers' errors come through buildTopology.
  std::vector<::mpmd::MeshSpec> twice = {{"m0", {{"x", 2}}}, {"m0", {{"x", 2}}}};
  CHECK(!buildTopology(&c.ctx, twice, emit));
  CHECK(c.onlyError("topology has duplicate mesh \"m0\""));
  std::vector<::mpmd::MeshSpec> zero = {{"m0", {{"x", 0}}}};
  CHECK(!buildTopology(&c.ctx, zero, emit));
  CHECK(c.onlyError("must have a positive size, got 0"));
}

void testTypedOrParsed() {
  int parses = 0;
  auto parse = [&]() -> FailureOr<int> {
    ++parses;
    return 7;
  };
  CHECK_EQ(*typedOrParsed<int>(std::optional<int>(3), parse), 3);
  CHECK_EQ(parses, 0); // typed values never go through text
  CHECK_EQ(*typedOrParsed<int>(std::nullopt, parse), 7);
  CHECK_EQ(parses, 1);
}

//===----------------------------------------------------------------------===//
// StructuralKey
//===----------------------------------------------------------------------===//

const char *kKeyModule = R"mlir(
func.func @a(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.add"(%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> loc("here")
  %1 = "stablehlo.multiply"(%0, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
// @a up to value names and locations.
func.func @renamed(%p: tensor<4xf32>, %q: tensor<4xf32>) -> tensor<4xf32> {
  %s = "stablehlo.add"(%p, %q) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> loc("there")
  %t = "stablehlo.multiply"(%s, %p) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %t : tensor<4xf32>
}
func.func @swapped(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.add"(%y, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "stablehlo.multiply"(%0, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func @attribute(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.add"(%x, %y) {tag = 1 : i32} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "stablehlo.multiply"(%0, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
// @a with one more (unused) argument.
func.func @extra(%x: tensor<4xf32>, %y: tensor<4xf32>, %z: tensor<2xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.add"(%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "stablehlo.multiply"(%0, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
// @extra with another type for the unused argument.
func.func @retyped(%x: tensor<4xf32>, %y: tensor<4xf32>, %z: tensor<2xf16>) -> tensor<4xf32> {
  %0 = "stablehlo.add"(%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "stablehlo.multiply"(%0, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func @constants() -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = "stablehlo.constant"() <{value = dense<1.0> : tensor<4xf32>}> : () -> tensor<4xf32>
  %1 = "stablehlo.constant"() <{value = dense<2.0> : tensor<4xf32>}> : () -> tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}
func.func @regions(%x: tensor<4xf32>, %y: tensor<4xf32>) {
  "test.wrap"() ({
  ^bb0(%a: tensor<4xf32>):
    "test.use"(%a, %x) : (tensor<4xf32>, tensor<4xf32>) -> ()
  }) : () -> ()
  "test.wrap"() ({
  ^bb0(%b: tensor<4xf32>):
    "test.use"(%b, %x) : (tensor<4xf32>, tensor<4xf32>) -> ()
  }) : () -> ()
  "test.wrap"() ({
  ^bb0(%b: tensor<4xf32>):
    "test.use"(%b, %y) : (tensor<4xf32>, tensor<4xf32>) -> ()
  }) : () -> ()
  "test.wrap"() ({
  ^bb0(%b: tensor<2xf32>):
    "test.use"(%b, %x) : (tensor<2xf32>, tensor<4xf32>) -> ()
  }) : () -> ()
  return
}
)mlir";

void testBlockKey() {
  Context c;
  OwningOpRef<ModuleOp> module = c.parse(kKeyModule);
  if (!module)
    return;
  auto key = [&](StringRef name, bool withArguments = true) {
    return blockKey(lookupFunc(*module, name).getBody().front(), withArguments);
  };
  CHECK(key("a") == key("renamed"));
  CHECK(key("a") == key("a")); // deterministic
  CHECK(key("a") != key("swapped"));
  CHECK(key("a") != key("attribute"));
  CHECK(key("a") != key("extra"));
  // Without the arguments, their types are not part of the key (their
  // number is: values are numbered from the arguments on).
  CHECK(key("extra") != key("retyped"));
  CHECK(key("extra", false) == key("retyped", false));
  CHECK(key("a", false) != key("extra", false));
}

void testPropertiesOverride() {
  Context c;
  OwningOpRef<ModuleOp> module = c.parse(kKeyModule);
  if (!module)
    return;
  SmallVector<Operation *> constants;
  for (Operation &op : lookupFunc(*module, "constants").getBody().front())
    if (op.getName().getStringRef() == "stablehlo.constant")
      constants.push_back(&op);
  CHECK_EQ(constants.size(), size_t(2));
  if (constants.size() != 2)
    return;
  CHECK(opKey(constants[0]) != opKey(constants[1]));
  // With their values masked, the two constants have one key.
  Attribute masked = UnitAttr::get(&c.ctx);
  auto mask = [&](Operation *op) -> Attribute {
    return op->getName().getStringRef() == "stablehlo.constant" ? masked : Attribute();
  };
  CHECK(opKey(constants[0], mask) == opKey(constants[1], mask));
}

void testOpKeyRegions() {
  Context c;
  OwningOpRef<ModuleOp> module = c.parse(kKeyModule);
  if (!module)
    return;
  SmallVector<Operation *> wraps;
  for (Operation &op : lookupFunc(*module, "regions").getBody().front())
    if (op.getName().getStringRef() == "test.wrap")
      wraps.push_back(&op);
  CHECK_EQ(wraps.size(), size_t(4));
  if (wraps.size() != 4)
    return;
  // Block arguments are numbered; values from outside are the values
  // themselves; argument types count.
  CHECK(opKey(wraps[0]) == opKey(wraps[1]));
  CHECK(opKey(wraps[1]) != opKey(wraps[2]));
  CHECK(opKey(wraps[1]) != opKey(wraps[3]));
}

//===----------------------------------------------------------------------===//
// Fragments
//===----------------------------------------------------------------------===//

const char *kFragmentModule = R"mlir(
!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
func.func @main(%arg0: !m0, %arg1: !m1) -> (!m0, !m1, !m0, !m1)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  %0 = mpmd.fragment<mesh="m0", origin=["s0"], stage=4> (%arg0) {call_counter = 2 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %1 = mpmd.fragment<mesh="m1", origin=["s1"(1)]> (%arg1) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %2 = mpmd.fragment<mesh="m0", origin=["s0", "s0"(1)]> (%0) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %3 = mpmd.fragment<mesh="m1", origin=["s1"(1)]> (%arg1) {call_counter = 1 : i32} (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  return %0, %1, %2, %3 : !m0, !m1, !m0, !m1
}
)mlir";

void testFragmentQueries() {
  Context c;
  OwningOpRef<ModuleOp> module = c.parse(kFragmentModule);
  if (!module)
    return;
  SmallVector<FragmentOp> f = opsOf<FragmentOp>(lookupFunc(*module, "main"));
  CHECK_EQ(f.size(), size_t(4));
  if (f.size() != 4)
    return;
  CHECK(isForwardFragment(f[0]) && !isBackwardFragment(f[0]));
  CHECK(isBackwardFragment(f[1]) && !isForwardFragment(f[1]));
  CHECK(!isForwardFragment(f[2]) && !isBackwardFragment(f[2])); // forward and backward merged
  CHECK_EQ(describeFragment(f[0]),
           std::string("fragment [\"s0\"] (microbatch 2, stage 4) on mesh \"m0\""));
  CHECK_EQ(describeFragment(f[2]), std::string("fragment [\"s0\", \"s0\"(1)] on mesh \"m0\""));
  CHECK(getNextFragmentOnMesh(f[0]) == f[2]);
  CHECK(getNextFragmentOnMesh(f[1]) == f[3]);
  CHECK(!getNextFragmentOnMesh(f[2]));
  // Scheduling units: kind, microbatch, stage (else the mesh's index), mesh.
  auto topology = lookupFunc(*module, "main")->getAttrOfType<TopologyAttr>(kTopologyAttr);
  std::optional<::mpmd::Unit> f0 = getSchedulingUnit(f[0], topology);
  CHECK(f0.has_value());
  if (f0) {
    CHECK_EQ(f0->mesh, std::string("m0"));
    CHECK_EQ(f0->kind, std::string("F"));
    CHECK_EQ(f0->microbatch, int64_t(2));
    CHECK_EQ(f0->stage, int64_t(4));
    CHECK_EQ(formatUnit(*f0, topology), std::string("F2.s4"));
  }
  std::optional<::mpmd::Unit> b1 = getSchedulingUnit(f[1], topology);
  CHECK(b1.has_value());
  if (b1) {
    CHECK_EQ(b1->kind, std::string("B"));
    CHECK_EQ(b1->stage, int64_t(1)); // numbered like its mesh
    CHECK_EQ(formatUnit(*b1, topology), std::string("B0"));
  }
  CHECK(!getSchedulingUnit(f[2], topology)); // forward and backward merged
  // Microbatches of one computation share a sibling key; other origins do not.
  CHECK(siblingKey(f[1]) == siblingKey(f[3]));
  CHECK(siblingKey(f[0]) != siblingKey(f[2]));
  CHECK(c.diagnostics.empty());
}

void testAccumulatedArguments() {
  Context c;
  OwningOpRef<ModuleOp> module = c.parse(R"mlir(
func.func @f(%acc: tensor<4xf32>, %x: tensor<4xf32>, %acc2: tensor<4xf32>, %loss: tensor<f32>,
             %n: tensor<4xi32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>,
                                    tensor<4xi32>, tensor<4xf32>, tensor<4xf32>) {
  %t = "stablehlo.multiply"(%x, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %0 = "stablehlo.add"(%acc, %t) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "stablehlo.add"(%t, %acc2) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = "stablehlo.add"(%acc, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %3 = "stablehlo.add"(%loss, %loss) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %4 = "stablehlo.add"(%n, %n) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %5 = "stablehlo.subtract"(%acc, %t) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0, %1, %2, %3, %4, %5, %x : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>,
                                       tensor<4xi32>, tensor<4xf32>, tensor<4xf32>
}
)mlir");
  if (!module)
    return;
  // Result 0 adds a term to %acc, result 1 to %acc2 (on either side); result
  // 2 adds to %acc and %x, the first of which result 0 took: %x. A scalar
  // (a summed loss), an integer, a difference and an argument returned as it
  // is are not accumulators.
  std::vector<std::pair<int64_t, int64_t>> want = {{0, 0}, {1, 2}, {2, 1}};
  CHECK(accumulatedArguments(lookupFunc(*module, "f")) == want);
  CHECK(c.diagnostics.empty());
}

void testCallCounters() {
  Context c;
  OwningOpRef<ModuleOp> module = c.parse(kFragmentModule);
  if (!module)
    return;
  SmallVector<FragmentOp> f = opsOf<FragmentOp>(lookupFunc(*module, "main"));
  if (f.size() != 4)
    return;
  auto counter = getCallCounter(f[0]);
  CHECK(succeeded(counter) && *counter == std::optional<uint32_t>(2));
  counter = getCallCounter(f[2]);
  CHECK(succeeded(counter) && !counter->has_value());
  CHECK(c.diagnostics.empty());
  // An i32 counter is an error naming the fragment.
  CHECK(failed(getCallCounter(f[3])));
  CHECK(c.onlyError("on mesh \"m1\": attribute `call_counter` must be a ui32 integer"));
  CHECK(failed(verifyCallCounters(*module)));
  CHECK(c.onlyError("must be a ui32 integer"));
  f[3]->removeAttr(kCallCounterAttr);
  CHECK(succeeded(verifyCallCounters(*module)));
  CHECK(c.diagnostics.empty());
}

//===----------------------------------------------------------------------===//
// InlineSingleBlockCallees
//===----------------------------------------------------------------------===//

const char *kCallModule = R"mlir(
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @twice(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @twice(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @twice(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @once(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @once(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @once(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.add"(%x, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "stablehlo.negate"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
)mlir";

SmallVector<Operation *> callsIn(ModuleOp module) {
  SmallVector<Operation *> calls;
  module.walk([&](func::CallOp call) { calls.push_back(call); });
  return calls;
}

void testInlinedSize() {
  Context c;
  OwningOpRef<ModuleOp> module = c.parse(kCallModule);
  if (!module)
    return;
  auto isCall = [](Operation *op) { return isa<func::CallOp>(op); };
  // A call counts as its callee's ops, terminator included: @once 3,
  // @twice 3 + 3 + 1, @main 7 + 7 + 1.
  CHECK(succeeded(checkInlinedSize(*module, "call to", "max-ops", isCall, 15)));
  CHECK(c.diagnostics.empty());
  CHECK(failed(checkInlinedSize(*module, "call to", "max-ops", isCall, 14)));
  CHECK(c.onlyError("inlining the call to calls of @main would make it 15 ops, over the limit of "
                    "14 (option max-ops)"));
  CHECK(succeeded(checkInlinedSize(*module, "call to", "max-ops", isCall, 0))); // 0: no limit
}

void testInlineSingleBlockCallees() {
  Context c;
  OwningOpRef<ModuleOp> module = c.parse(kCallModule);
  if (!module)
    return;
  int cloned = 0;
  CHECK(succeeded(inlineSingleBlockCallees(
      *module, "call to", [&] { return callsIn(*module); },
      [&](Operation *, Operation *) { ++cloned; })));
  CHECK(callsIn(*module).empty());
  // The private callees are gone; @main holds 4 copies of @once's two ops.
  CHECK(!lookupFunc(*module, "twice") && !lookupFunc(*module, "once"));
  func::FuncOp main = lookupFunc(*module, "main");
  CHECK(main && main.getBody().front().getOperations().size() == 9);
  CHECK_EQ(cloned, 4 + 8); // @twice's calls (twice each), then @once's ops (four times)
  CHECK(c.diagnostics.empty());

  OwningOpRef<ModuleOp> recursive = c.parse(R"mlir(
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @loop(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @loop(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @loop(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
)mlir");
  if (!recursive)
    return;
  CHECK(failed(inlineSingleBlockCallees(
      *recursive, "call to", [&] { return callsIn(*recursive); }, [](Operation *, Operation *) {})));
  CHECK(c.onlyError("recursive call to @loop cannot be inlined"));
}

//===----------------------------------------------------------------------===//
// MergeFragments
//===----------------------------------------------------------------------===//

void testMergeFragments() {
  Context c;
  OwningOpRef<ModuleOp> module = c.parse(R"mlir(
!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
func.func @main(%arg0: !m0) -> (!m0, !m0)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  %0 = mpmd.fragment<mesh="m0", origin=["a"]> (%arg0) (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n : tensor<4xf32>
  } : (!m0) -> !m0
  %t = mpmd.transfer %0 : (!m0) -> !m1
  %back = mpmd.transfer %t : (!m1) -> !m0
  %1 = mpmd.fragment<mesh="m0", origin=["b"]> (%back) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %2 = mpmd.fragment<mesh="m0", origin=["c"]> (%0) (%a: tensor<4xf32>) {
    %e = "stablehlo.exponential"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %e : tensor<4xf32>
  } : (!m0) -> !m0
  return %1, %2 : !m0, !m0
}
)mlir");
  if (!module)
    return;
  func::FuncOp main = lookupFunc(*module, "main");
  SmallVector<FragmentOp> f = opsOf<FragmentOp>(main);
  if (f.size() != 3) {
    CHECK(false && "three fragments");
    return;
  }
  // "b" needs a value computed from "a" through another mesh: neither
  // position works, and nothing changes.
  std::string before = print(*module);
  CHECK(!mergeIfLegal(f[0], f[1]));
  CHECK_EQ(print(*module), before);
  // "a" into "c": one fragment whose body runs a's ops, then c's.
  FragmentOp merged = mergeIfLegal(f[0], f[2]);
  CHECK(merged);
  if (!merged)
    return;
  CHECK_EQ(opsOf<FragmentOp>(main).size(), size_t(2));
  CHECK_EQ(merged.getOrigin().size(), size_t(2));
  SmallVector<StringRef> body;
  for (Operation &op : merged.getRegion().front())
    body.push_back(op.getName().getStringRef());
  CHECK_EQ(body.size(), size_t(3));
  if (body.size() == 3) {
    CHECK_EQ(body[0], StringRef("stablehlo.negate"));
    CHECK_EQ(body[1], StringRef("stablehlo.exponential"));
  }
  // a's result is still used by the transfer: the merged fragment returns it.
  CHECK_EQ(merged->getNumResults(), 2u);
  CHECK(succeeded(verify(*module)));
  CHECK(c.diagnostics.empty());
}

//===----------------------------------------------------------------------===//
// MeshAssignmentAnalysis
//===----------------------------------------------------------------------===//

void testMeshAssignmentAnalysis() {
  Context c;
  OwningOpRef<ModuleOp> module = c.parse(R"mlir(
!m0 = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!m1 = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
func.func @main(%x: tensor<4xf32>, %y: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
  %c = "stablehlo.negate"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %a0 = mpmd.assign %c : (tensor<4xf32>) -> !m0
  %a1 = mpmd.assign %c : (tensor<4xf32>) -> !m1
  %f = mpmd.fragment<mesh="m0", origin=["s0"]> (%a0) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m0) -> !m0
  %u = mpmd.unassign %f : (!m0) -> tensor<4xf32>
  %e = "stablehlo.exponential"(%u) : (tensor<4xf32>) -> tensor<4xf32>
  %g = mpmd.fragment<mesh="m1", origin=["s1"]> (%a1) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m1) -> !m1
  %v = mpmd.unassign %g : (!m1) -> tensor<4xf32>
  %s = "stablehlo.add"(%e, %v) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %w = "stablehlo.abs"(%y) : (tensor<4xf32>) -> tensor<4xf32>
  return %s, %w : tensor<4xf32>, tensor<4xf32>
}
)mlir");
  if (!module)
    return;
  func::FuncOp main = lookupFunc(*module, "main");
  std::string before = print(*module);
  std::optional<std::vector<::mpmd::IndexAssignment>> none;
  std::vector<std::string> outputs = {"1@m1"};
  MeshInferenceOptions options;
  options.typedInputAssignment = &none;
  options.typedOutputAssignment = &none;
  options.outputAssignment = outputs;
  MeshAssignmentAnalysis analysis(main, main->getAttrOfType<TopologyAttr>(kTopologyAttr), options);
  CHECK(succeeded(analysis.computeSources()));
  analysis.placeByUse();
  CHECK(succeeded(analysis.placeInputsAndFloating()));
  CHECK(c.diagnostics.empty());
  CHECK_EQ(print(*module), before); // the analysis changes nothing

  ArrayRef<Operation *> ops = analysis.getMeshless();
  CHECK_EQ(ops.size(), size_t(4));
  if (ops.size() != 4)
    return;
  Operation *negate = ops[0], *exp = ops[1], *add = ops[2], *abs = ops[3];
  MeshSet m0 = 1, m1 = 2;
  // Input-only: cloned to both labelled users.
  CHECK_EQ(analysis.getSource(negate), m0 | m1);
  CHECK_EQ(analysis.getPlacement(negate), m0 | m1);
  // After "s0": on m0, its source.
  CHECK_EQ(analysis.getSource(exp), m0);
  CHECK_EQ(analysis.getPlacement(exp), m0);
  // Values of m0 and m1 summed: no common source; the lowest mesh.
  CHECK_EQ(analysis.getSource(add), MeshSet(0));
  CHECK_EQ(analysis.getPlacement(add), m0);
  CHECK(analysis.getRole(add) == MeshRole::kOrdinary);
  CHECK(analysis.sumsAcrossMeshes(add));
  // Only returned, as output 1 assigned to m1: used there, as is its input.
  CHECK_EQ(analysis.getPlacement(abs), m1);
  CHECK_EQ(analysis.getInputHome(main.getArgument(0)), int64_t(0));
  CHECK_EQ(analysis.getInputHome(main.getArgument(1)), int64_t(1));
  CHECK(analysis.getOutputMesh(1) == std::optional<int64_t>(1));
  CHECK(!analysis.getOutputMesh(0));

  // With infer-cross-mesh-reductions, the add is one cross-mesh sum.
  options.inferCrossMeshReductions = true;
  MeshAssignmentAnalysis reductions(main, main->getAttrOfType<TopologyAttr>(kTopologyAttr),
                                    options);
  CHECK(succeeded(reductions.computeSources()));
  if (reductions.getMeshless().size() == 4) {
    Operation *sum = reductions.getMeshless()[2];
    CHECK(reductions.getRole(sum) == MeshRole::kReduce);
    CHECK(reductions.getReductionKind(sum) == ReductionType::kAdd);
    CHECK_EQ(reductions.getSource(sum), m0 | m1);
    CHECK(reductions.isReductionDerived(sum));
  }

  // An output assigned to a mesh outside the topology is an error.
  std::vector<std::string> bad = {"0@m7"};
  options.outputAssignment = bad;
  MeshAssignmentAnalysis wrong(main, main->getAttrOfType<TopologyAttr>(kTopologyAttr), options);
  CHECK(failed(wrong.computeSources()));
  CHECK(c.onlyError("output 0 is assigned to mesh \"m7\" which is not in the topology"));
}

struct Test {
  const char *name;
  void (*run)();
};

const Test kTests[] = {
    {"text-options/name-assignment", testNameAssignment},
    {"text-options/index-assignment", testIndexAssignment},
    {"text-options/unit-lines", testUnitLines},
    {"text-options/unit-format", testUnitFormat},
    {"text-options/topology", testTopology},
    {"text-options/printers-round-trip", testPrintersRoundTrip},
    {"text-options/typed-or-parsed", testTypedOrParsed},
    {"structural-key/block-key", testBlockKey},
    {"structural-key/properties-override", testPropertiesOverride},
    {"structural-key/op-key-regions", testOpKeyRegions},
    {"fragments/queries", testFragmentQueries},
    {"fragments/call-counters", testCallCounters},
    {"fragments/accumulated-arguments", testAccumulatedArguments},
    {"inline-single-block-callees/inlined-size", testInlinedSize},
    {"inline-single-block-callees/inline", testInlineSingleBlockCallees},
    {"merge-fragments/merge-if-legal", testMergeFragments},
    {"mesh-assignment-analysis/placements", testMeshAssignmentAnalysis},
};

} // namespace

int main(int argc, char **argv) {
  int run = 0, failedTests = 0;
  for (const Test &test : kTests) {
    bool selected = argc < 2;
    for (int i = 1; i < argc; ++i)
      selected |= StringRef(test.name).starts_with(argv[i]);
    if (!selected)
      continue;
    int before = failedChecks;
    test.run();
    ++run;
    bool ok = failedChecks == before;
    failedTests += !ok;
    llvm::outs() << (ok ? "PASS " : "FAIL ") << test.name << "\n";
  }
  llvm::outs() << run << " tests, " << failedTests << " failed\n";
  return run == 0 || failedTests ? 1 : 0;
}
