// select-algorithm: the algorithm of every phase. Unset, each dimension's building block says (ASTRA-sim 2.0's
// defaults: Ring -> ring, Switch -> halving_doubling, an all-to-all on a switch -> direct); the option names one
// algorithm, or one per dimension (aliases resolved: dbt is double_binary_tree). A phase that already names its
// algorithm keeps it.
// RUN: astra-compile %s --topology "Ring(4)_Switch(8)" --scheduler baseline --print-ir-after-all --emit mlir 2>&1 | filecheck %s
// RUN: astra-compile %s --topology "Ring(4)_Switch(8)" --scheduler baseline --algorithm dbt,direct --print-ir-after-all --emit mlir 2>&1 | filecheck %s --check-prefix=LIST
// An algorithm that has no schedule for a dimension is refused in one line, naming the pass and those before it.
// RUN: not astra-compile %s --topology "Ring(4)_Switch(6)" --algorithm halving_doubling 2>&1 | filecheck %s --check-prefix=BAD

module {
  %0 = "comm.all_reduce"() {bytes = 1048576 : i64, dims = array<i64: 0, 1>, name = "g"} : () -> !comm.token
  %1 = "comm.all_to_all"(%0) {bytes = 65536 : i64, dims = array<i64: 1>, name = "x"} : (!comm.token) -> !comm.token
  %2 = "comm.phase"(%1) {algorithm = "ring", bytes = 65536 : i64, chunks = 1 : i64, collective = "y", dim = 1 : i64, group_bytes = 65536 : i64, group_dims = array<i64: 1>, kind = "all_gather", stage = 0 : i64} : (!comm.token) -> !comm.token
}

// CHECK-LABEL: IR Dump After hierarchical-decompose
// CHECK-NOT:   algorithm = "{{[a-z_]+}}", bytes = 1048576
// CHECK-LABEL: IR Dump After select-algorithm: select-algorithm //
// CHECK:       "comm.phase"() {algorithm = "ring", {{.*}}collective = "g.rs", dim = 0 : i64
// CHECK-NEXT:  "comm.phase"({{.*}}) {algorithm = "halving_doubling", {{.*}}collective = "g.rs", dim = 1 : i64
// CHECK-NEXT:  "comm.phase"({{.*}}) {algorithm = "halving_doubling", {{.*}}collective = "g.ag", dim = 1 : i64
// CHECK-NEXT:  "comm.phase"({{.*}}) {algorithm = "ring", {{.*}}collective = "g.ag", dim = 0 : i64
// CHECK-NEXT:  "comm.phase"({{.*}}) {algorithm = "direct", {{.*}}collective = "x", dim = 1 : i64, {{.*}}kind = "all_to_all"
// CHECK-NEXT:  "comm.phase"({{.*}}) {algorithm = "ring", {{.*}}collective = "y", dim = 1 : i64
// CHECK-LABEL: IR Dump After baseline-order

// LIST-LABEL: IR Dump After select-algorithm: select-algorithm{algorithm=double_binary_tree,direct}
// LIST:       "comm.phase"() {algorithm = "double_binary_tree", {{.*}}collective = "g.rs", dim = 0 : i64
// LIST-NEXT:  "comm.phase"({{.*}}) {algorithm = "direct", {{.*}}collective = "g.rs", dim = 1 : i64
// LIST-NEXT:  "comm.phase"({{.*}}) {algorithm = "direct", {{.*}}collective = "g.ag", dim = 1 : i64
// LIST-NEXT:  "comm.phase"({{.*}}) {algorithm = "double_binary_tree", {{.*}}collective = "g.ag", dim = 0 : i64
// LIST-NEXT:  "comm.phase"({{.*}}) {algorithm = "direct", {{.*}}collective = "x", dim = 1 : i64
// LIST-NEXT:  "comm.phase"({{.*}}) {algorithm = "ring", {{.*}}collective = "y", dim = 1 : i64
// LIST-LABEL: IR Dump After baseline-order

// BAD:     astra-compile: error: {{.*}}select-algorithm.mlir: pass select-algorithm failed after decompose-all-reduce, chunk, hierarchical-decompose: halving_doubling needs a power-of-two group, dimension 1 has 6 NPUs
// BAD-NOT: IR Dump
