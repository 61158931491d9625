// RUN: mpmd-opt %s -split-input-file -mpmd-unroll-for-loops -verify-diagnostics
// RUN: %python -c "n = 300; T = 'tensor<4xf32>'; P = chr(37); print('func.func @deep(' + P + 'a: ' + T + ') -> ' + T + ' {'); print(' '.join(P + 'r' + str(k) + ' = mpmd.for (' + P + ('a' if k == 0 else 'x' + str(k - 1)) + ') {iterations = 1 : ui32} (' + P + 'x' + str(k) + ': ' + T + ', ' + P + 'i' + str(k) + ': tensor<ui32>) {' for k in range(n))); print(' '.join('mpmd.return ' + P + ('x' + str(n - 1) if k == n - 1 else 'r' + str(k + 1)) + ' : ' + T + ' } : ' + T for k in reversed(range(n)))); print('return ' + P + 'r0 : ' + T + ' }')" > %t.deep.mlir
// RUN: not mpmd-opt %t.deep.mlir -mpmd-unroll-for-loops 2>&1 | FileCheck %s --check-prefix=DEPTH
// DEPTH: error: this mpmd.for is nested in 256 other mpmd.for loops, the most mpmd unrolls: flatten the loop nest
// One op over max-unrolled-ops (@one_over below: 9 ops once unrolled, limit 8):
// RUN: sed -n '/^\/\/ ONE-OVER-BEGIN/,/^\/\/ ONE-OVER-END/p' %s | not mpmd-opt -mpmd-unroll-for-loops=max-unrolled-ops=8 2>&1 | FileCheck %s --check-prefix=OVER
// OVER: error: unrolling this mpmd.for (3 iterations) would make @one_over 9 ops (7 of them this loop's), over the limit of 8 ops a function (option max-unrolled-ops of -mpmd-unroll-for-loops)

// Unroll bombs: loops whose unrolled size is over max-unrolled-ops are
// rejected before anything is unrolled.

func.func @huge_iterations(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{unrolling this mpmd.for (4294967295 iterations) would make @huge_iterations 8589934593 ops (8589934591 of them this loop's), over the limit of 1000000 ops a function (option max-unrolled-ops of -mpmd-unroll-for-loops)}}
  %0 = mpmd.for (%a) {iterations = 4294967295 : ui32, unroll_factor = 4294967295 : ui32} (%x: tensor<4xf32>, %index: tensor<ui32>) {
    %1 = "stablehlo.add"(%x, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %1 : tensor<4xf32>
  } : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// A malformed mesh tensor type in the signature is reported before anything
// is unrolled (no op verifier sees it: only the loop carries it).
!bad = !mpmd.mesh_tensor<"m", tensor<4xf32>, memory_kind="hbm">
// expected-error @+1 {{input #0 of @bad_signature: memory kind must be either 'device', 'pinned_host' or 'unpinned_host'. Found 'hbm'}}
func.func @bad_signature(%a: !bad) -> !bad attributes {topology = #mpmd.topology<<"m" : <["x"=2]>>>} {
  %0 = mpmd.for (%a) {iterations = 2 : ui32} (%x: !bad, %index: tensor<ui32>) {
    mpmd.return %x : !bad
  } : !bad
  return %0 : !bad
}

// -----

// 24 nested loops of 2 iterations: 2^24 copies of the innermost body.

func.func @nested(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{unrolling this mpmd.for (2 iterations, with nested loops) would make @nested 50331647 ops (50331645 of them this loop's)}}
  %r0 = mpmd.for (%a) {iterations = 2 : ui32} (%x0: tensor<4xf32>, %i0: tensor<ui32>) {
    %r1 = mpmd.for (%x0) {iterations = 2 : ui32} (%x1: tensor<4xf32>, %i1: tensor<ui32>) {
      %r2 = mpmd.for (%x1) {iterations = 2 : ui32} (%x2: tensor<4xf32>, %i2: tensor<ui32>) {
        %r3 = mpmd.for (%x2) {iterations = 2 : ui32} (%x3: tensor<4xf32>, %i3: tensor<ui32>) {
          %r4 = mpmd.for (%x3) {iterations = 2 : ui32} (%x4: tensor<4xf32>, %i4: tensor<ui32>) {
            %r5 = mpmd.for (%x4) {iterations = 2 : ui32} (%x5: tensor<4xf32>, %i5: tensor<ui32>) {
              %r6 = mpmd.for (%x5) {iterations = 2 : ui32} (%x6: tensor<4xf32>, %i6: tensor<ui32>) {
                %r7 = mpmd.for (%x6) {iterations = 2 : ui32} (%x7: tensor<4xf32>, %i7: tensor<ui32>) {
                  %r8 = mpmd.for (%x7) {iterations = 2 : ui32} (%x8: tensor<4xf32>, %i8: tensor<ui32>) {
                    %r9 = mpmd.for (%x8) {iterations = 2 : ui32} (%x9: tensor<4xf32>, %i9: tensor<ui32>) {
                      %r10 = mpmd.for (%x9) {iterations = 2 : ui32} (%x10: tensor<4xf32>, %i10: tensor<ui32>) {
                        %r11 = mpmd.for (%x10) {iterations = 2 : ui32} (%x11: tensor<4xf32>, %i11: tensor<ui32>) {
                          %r12 = mpmd.for (%x11) {iterations = 2 : ui32} (%x12: tensor<4xf32>, %i12: tensor<ui32>) {
                            %r13 = mpmd.for (%x12) {iterations = 2 : ui32} (%x13: tensor<4xf32>, %i13: tensor<ui32>) {
                              %r14 = mpmd.for (%x13) {iterations = 2 : ui32} (%x14: tensor<4xf32>, %i14: tensor<ui32>) {
                                %r15 = mpmd.for (%x14) {iterations = 2 : ui32} (%x15: tensor<4xf32>, %i15: tensor<ui32>) {
                                  %r16 = mpmd.for (%x15) {iterations = 2 : ui32} (%x16: tensor<4xf32>, %i16: tensor<ui32>) {
                                    %r17 = mpmd.for (%x16) {iterations = 2 : ui32} (%x17: tensor<4xf32>, %i17: tensor<ui32>) {
                                      %r18 = mpmd.for (%x17) {iterations = 2 : ui32} (%x18: tensor<4xf32>, %i18: tensor<ui32>) {
                                        %r19 = mpmd.for (%x18) {iterations = 2 : ui32} (%x19: tensor<4xf32>, %i19: tensor<ui32>) {
                                          %r20 = mpmd.for (%x19) {iterations = 2 : ui32} (%x20: tensor<4xf32>, %i20: tensor<ui32>) {
                                            %r21 = mpmd.for (%x20) {iterations = 2 : ui32} (%x21: tensor<4xf32>, %i21: tensor<ui32>) {
                                              %r22 = mpmd.for (%x21) {iterations = 2 : ui32} (%x22: tensor<4xf32>, %i22: tensor<ui32>) {
                                                %r23 = mpmd.for (%x22) {iterations = 2 : ui32} (%x23: tensor<4xf32>, %i23: tensor<ui32>) {
                                                  mpmd.return %x23 : tensor<4xf32>
                                                } : tensor<4xf32>
                                                mpmd.return %r23 : tensor<4xf32>
                                              } : tensor<4xf32>
                                              mpmd.return %r22 : tensor<4xf32>
                                            } : tensor<4xf32>
                                            mpmd.return %r21 : tensor<4xf32>
                                          } : tensor<4xf32>
                                          mpmd.return %r20 : tensor<4xf32>
                                        } : tensor<4xf32>
                                        mpmd.return %r19 : tensor<4xf32>
                                      } : tensor<4xf32>
                                      mpmd.return %r18 : tensor<4xf32>
                                    } : tensor<4xf32>
                                    mpmd.return %r17 : tensor<4xf32>
                                  } : tensor<4xf32>
                                  mpmd.return %r16 : tensor<4xf32>
                                } : tensor<4xf32>
                                mpmd.return %r15 : tensor<4xf32>
                              } : tensor<4xf32>
                              mpmd.return %r14 : tensor<4xf32>
                            } : tensor<4xf32>
                            mpmd.return %r13 : tensor<4xf32>
                          } : tensor<4xf32>
                          mpmd.return %r12 : tensor<4xf32>
                        } : tensor<4xf32>
                        mpmd.return %r11 : tensor<4xf32>
                      } : tensor<4xf32>
                      mpmd.return %r10 : tensor<4xf32>
                    } : tensor<4xf32>
                    mpmd.return %r9 : tensor<4xf32>
                  } : tensor<4xf32>
                  mpmd.return %r8 : tensor<4xf32>
                } : tensor<4xf32>
                mpmd.return %r7 : tensor<4xf32>
              } : tensor<4xf32>
              mpmd.return %r6 : tensor<4xf32>
            } : tensor<4xf32>
            mpmd.return %r5 : tensor<4xf32>
          } : tensor<4xf32>
          mpmd.return %r4 : tensor<4xf32>
        } : tensor<4xf32>
        mpmd.return %r3 : tensor<4xf32>
      } : tensor<4xf32>
      mpmd.return %r2 : tensor<4xf32>
    } : tensor<4xf32>
    mpmd.return %r1 : tensor<4xf32>
  } : tensor<4xf32>
  return %r0 : tensor<4xf32>
}

// -----

// ONE-OVER-BEGIN
// Unrolled, @one_over has 9 ops (the function, 3 x (index constant, add), the
// return): over a limit of 8 (at a limit of 9 it unrolls, see
// unroll_for_loops.mlir). Under the default limit it unrolls here too.

func.func @one_over(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mpmd.for (%a) {iterations = 3 : ui32} (%x: tensor<4xf32>, %i: tensor<ui32>) {
    %1 = "stablehlo.add"(%x, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %1 : tensor<4xf32>
  } : tensor<4xf32>
  return %0 : tensor<4xf32>
}
// ONE-OVER-END
