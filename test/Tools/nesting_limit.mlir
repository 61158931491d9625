// Deeply nested modules: mpmd-opt parses and runs passes on a thread with a
// large stack (it used to overflow the stack at about 2,000 nested regions),
// and rejects nesting deeper than 4096 with a message (mpmd/Support/Limits.h).

// RUN: %python -c "n = 3000; print('func.func @deep() {' + '\"t.op\"() ({' * n + '}) : () -> ()' * n + ' return }')" > %t.ok.mlir
// RUN: mpmd-opt %t.ok.mlir -mpmd-import-pipeline='topology=m0:x=1 func=deep' | FileCheck %s --check-prefix=OK
// RUN: %python -c "n = 5000; print('func.func @deep() {' + '\"t.op\"() ({' * n + '}) : () -> ()' * n + ' return }')" > %t.deep.mlir
// RUN: not mpmd-opt %t.deep.mlir 2>&1 | FileCheck %s --check-prefix=DEEP
// Closing braces in a comment do not hide nesting; opening ones do not count.
// RUN: %python -c "n = 5000; print('// ' + '}' * n); print('func.func @deep() {' + '\"t.op\"() ({' * n + '}) : () -> ()' * n + ' return }')" > %t.comment.mlir
// RUN: not mpmd-opt %t.comment.mlir 2>&1 | FileCheck %s --check-prefix=COMMENT
// RUN: %python -c "print('// ' + '{' * 5000); print('func.func @flat() { return }')" | mpmd-opt | FileCheck %s --check-prefix=FLAT
// Arrays, types and operand lists count too (one depth per kind of bracket).
// RUN: %python -c "n = 100000; print('func.func @f() attributes {a = ' + '[' * n + ']' * n + '} { return }')" > %t.array.mlir
// RUN: not mpmd-opt %t.array.mlir 2>&1 | FileCheck %s --check-prefix=ARRAY

// OK-LABEL: func.func @deep
// DEEP: deep.mlir:1:{{[0-9]+}}: error: the module nests regions, attributes or types more than 4096 deep, the most mpmd accepts
// COMMENT: comment.mlir:2:{{[0-9]+}}: error: the module nests regions, attributes or types more than 4096 deep
// FLAT-LABEL: func.func @flat
// ARRAY: array.mlir:1:4128: error: the module nests regions, attributes or types more than 4096 deep
