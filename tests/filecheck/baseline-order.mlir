// baseline-order: every chunk visits the dimensions in the decomposition's own order (ASTRA-sim's baseline):
// each phase's `order` (its position in every chunk's chain) is its stage, its bytes the decomposition's, and the
// module records whose orders it holds (comm.scheduler = "baseline"). After another scheduler it takes the
// module back to the baseline.
// RUN: astra-compile %s --topology "Switch(2)_Switch(2)" --bandwidth 25,100 --latency 0 --scheduler baseline --print-ir-after-all --emit mlir 2>&1 | filecheck %s
// RUN: astra-compile %s --topology "Switch(2)_Switch(2)" --bandwidth 25,100 --latency 0 --pass-pipeline decompose-all-reduce,chunk,hierarchical-decompose,select-algorithm,themis,baseline-order --print-ir-after-all --emit mlir 2>&1 | filecheck %s --check-prefix=BACK

module {
  %0 = "comm.all_reduce"() {bytes = 4096 : i64, chunks = 4 : i64, dims = array<i64: 0, 1>, name = "g"} : () -> !comm.token
}

// CHECK-LABEL: IR Dump After select-algorithm
// CHECK-NOT:   order =
// CHECK-LABEL: IR Dump After baseline-order: baseline-order
// CHECK:       module attributes {comm.scheduler = "baseline",
// CHECK-NEXT:  "comm.phase"() {algorithm = "halving_doubling", bytes = 4096 : i64, {{.*}}collective = "g.rs", dim = 0 : i64, {{.*}}order = array<i64: 0, 0, 0, 0>, {{.*}}stage = 0 : i64}
// CHECK-NEXT:  "comm.phase"({{.*}}) {algorithm = "halving_doubling", bytes = 2048 : i64, {{.*}}collective = "g.rs", dim = 1 : i64, {{.*}}order = array<i64: 1, 1, 1, 1>, {{.*}}stage = 1 : i64}
// CHECK-NEXT:  "comm.phase"({{.*}}) {algorithm = "halving_doubling", bytes = 2048 : i64, {{.*}}collective = "g.ag", dim = 1 : i64, {{.*}}order = array<i64: 0, 0, 0, 0>, {{.*}}stage = 0 : i64}
// CHECK-NEXT:  "comm.phase"({{.*}}) {algorithm = "halving_doubling", bytes = 4096 : i64, {{.*}}collective = "g.ag", dim = 0 : i64, {{.*}}order = array<i64: 1, 1, 1, 1>, {{.*}}stage = 1 : i64}

// BACK-LABEL: IR Dump After themis: themis{latency=true active=1}
// BACK:       module attributes {comm.scheduler = "themis",
// BACK-NEXT:  "comm.phase"() {algorithm = "halving_doubling", bytes = 2560 : i64, {{.*}}collective = "g.rs", dim = 0 : i64, {{.*}}order = array<i64: 0, 1, 1, 1>
// BACK-LABEL: IR Dump After baseline-order: baseline-order
// BACK:       module attributes {comm.scheduler = "baseline",
// BACK-NEXT:  "comm.phase"() {algorithm = "halving_doubling", bytes = 4096 : i64, {{.*}}collective = "g.rs", dim = 0 : i64, {{.*}}order = array<i64: 0, 0, 0, 0>
// BACK-NEXT:  "comm.phase"({{.*}}) {algorithm = "halving_doubling", bytes = 2048 : i64, {{.*}}collective = "g.rs", dim = 1 : i64, {{.*}}order = array<i64: 1, 1, 1, 1>
