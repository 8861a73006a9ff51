// themis: each chunk's reduce-scatter visits the least-loaded dimension first (its all-gather the reverse), loads
// counted per dimension over the module's chunks (Themis, ISCA'22). Dimension 0 is four times slower: the first
// chunk takes it first (both idle: the lower dimension), which loads it the most, so chunks 1-3 start on
// dimension 1. The phase bytes are what each dimension now carries over the four chunks.
// RUN: astra-compile %s --topology "Switch(2)_Switch(2)" --bandwidth 25,100 --latency 0 --scheduler themis --print-ir-after-all --emit mlir 2>&1 | filecheck %s
// Without select-algorithm first there is nothing to weigh: its precondition refuses, in one line.
// RUN: not astra-compile %s --topology "Switch(2)_Switch(2)" --pass-pipeline decompose-all-reduce,hierarchical-decompose,themis 2>&1 | filecheck %s --check-prefix=ORDER

module {
  %0 = "comm.all_reduce"() {bytes = 4096 : i64, chunks = 4 : i64, dims = array<i64: 0, 1>, name = "g"} : () -> !comm.token
}

// CHECK-LABEL: IR Dump After select-algorithm
// CHECK-NOT:   order =
// CHECK-LABEL: IR Dump After themis: themis{latency=true active=1}
// CHECK:       module attributes {comm.scheduler = "themis",
// CHECK-NEXT:  "comm.phase"() {algorithm = "halving_doubling", bytes = 2560 : i64, {{.*}}collective = "g.rs", dim = 0 : i64, {{.*}}order = array<i64: 0, 1, 1, 1>
// CHECK-NEXT:  "comm.phase"({{.*}}) {algorithm = "halving_doubling", bytes = 3584 : i64, {{.*}}collective = "g.rs", dim = 1 : i64, {{.*}}order = array<i64: 1, 0, 0, 0>
// CHECK-NEXT:  "comm.phase"({{.*}}) {algorithm = "halving_doubling", bytes = 3584 : i64, {{.*}}collective = "g.ag", dim = 1 : i64, {{.*}}order = array<i64: 0, 1, 1, 1>
// CHECK-NEXT:  "comm.phase"({{.*}}) {algorithm = "halving_doubling", bytes = 2560 : i64, {{.*}}collective = "g.ag", dim = 0 : i64, {{.*}}order = array<i64: 1, 0, 0, 0>

// ORDER: astra-compile: error: {{.*}}themis.mlir: pass themis failed after decompose-all-reduce, hierarchical-decompose: themis needs every phase's algorithm: run select-algorithm first
