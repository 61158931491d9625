// Deeply nested modules: mpmd-opt parses and runs passes on a thread with a
// large stack (it used to overflow the stack at about 2,000 nested regions),
// and rejects nesting deeper than 4096 with a message (mpmd/Support/Limits.h).

// RUN: %python -c "n = 3000; print('func.func @deep() {' + '\"t.op\"() ({' * n + '}) : () -> ()' * n + ' return }')" > %t.ok.mlir
// RUN: mpmd-opt %t.ok.mlir -mpmd-import-pipeline='topology=m0:x=1 func=deep' | FileCheck %s --check-prefix=OK
// RUN: %python -c "n = 5000; print('func.func @deep() {' + '\"t.op\"() ({' * n + '}) : () -> ()' * n + ' return }')" > %t.deep.mlir
// RUN: not mpmd-opt %t.deep.mlir 2>&1 | FileCheck %s --check-prefix=DEEP

// OK-LABEL: func.func @deep
// DEEP: line 1: the module nests regions (or attribute dictionaries) more than 4096 deep, the most mpmd accepts
