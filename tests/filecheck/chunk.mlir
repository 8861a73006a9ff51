// chunk: every collective without a chunk count gets the pass's; one written in the input keeps its own. The
// phases hierarchical-decompose makes copy their collective's count.
// RUN: astra-compile %s --topology "Ring(6)_FC(4)" --pass-pipeline "decompose-all-reduce,chunk{chunks=4},hierarchical-decompose,select-algorithm" --print-ir-after-all --emit mlir 2>&1 | filecheck %s
// RUN: astra-compile %s --topology "Ring(6)_FC(4)" --chunks 8 --print-ir-after-all --emit mlir 2>&1 | filecheck %s --check-prefix=FLAG

module {
  %0 = "comm.all_reduce"() {bytes = 4800 : i64, chunks = 3 : i64, dims = array<i64: 0>, name = "a"} : () -> !comm.token
  %1 = "comm.all_gather"(%0) {bytes = 4800 : i64, dims = array<i64: 0, 1>, name = "b"} : (!comm.token) -> !comm.token
}

// CHECK-LABEL: IR Dump After chunk: chunk{chunks=4}
// CHECK:       "comm.reduce_scatter"() {bytes = 4800 : i64, chunks = 3 : i64, {{.*}}name = "a.rs"
// CHECK-NEXT:  "comm.all_gather"({{.*}}) {bytes = 4800 : i64, chunks = 3 : i64, {{.*}}name = "a.ag"
// CHECK-NEXT:  "comm.all_gather"({{.*}}) {bytes = 4800 : i64, chunks = 4 : i64, dims = array<i64: 0, 1>, name = "b"}
// CHECK-LABEL: IR Dump After hierarchical-decompose
// CHECK-COUNT-2: "comm.phase"({{.*}}) {bytes = 4800 : i64, chunks = 3 : i64,
// CHECK-COUNT-2: "comm.phase"({{.*}}) {bytes = {{[0-9]+}} : i64, chunks = 4 : i64, collective = "b"

// --chunks fills the option the default pipeline's chunk leaves unset, and its header says so
// FLAG-LABEL: IR Dump After chunk: chunk{chunks=8}
// FLAG:       chunks = 3 : i64, {{.*}}name = "a.rs"
// FLAG:       chunks = 8 : i64, dims = array<i64: 0, 1>, name = "b"
// FLAG-LABEL: IR Dump After hierarchical-decompose
