// optimal-balance: CP-SAT splits the chunks over the dimension orders so that the busiest dimension's estimated
// load is least, writes the orders and bytes, and records the solver's status (comm.balance). Dimension 1 is four
// times faster: every chunk's reduce-scatter starts there, on the whole chunk, and dimension 0 gets the quarter
// of it left. Its options all show in the header, time-limit included.
// RUN: astra-compile %s --topology "Switch(2)_Switch(2)" --bandwidth 25,100 --latency 0 --print-ir-after-all --emit mlir 2>&1 | filecheck %s
// RUN: astra-compile %s --topology "Switch(2)_Switch(2)" --bandwidth 25,100 --latency 0 --active-chunks 2 --pass-pipeline "decompose-all-reduce,chunk,hierarchical-decompose,select-algorithm,optimal-balance{time-limit=1.5 latency=false}" --print-ir-after-all --emit mlir 2>&1 | filecheck %s --check-prefix=OPTS

module {
  %0 = "comm.all_reduce"() {bytes = 4096 : i64, chunks = 4 : i64, dims = array<i64: 0, 1>, name = "g"} : () -> !comm.token
}

// CHECK-LABEL: IR Dump After select-algorithm
// CHECK-NOT:   order =
// CHECK-LABEL: IR Dump After optimal-balance: optimal-balance{latency=true active=1 time-limit=5.0}
// CHECK:       module attributes {comm.balance = "OPTIMAL", comm.scheduler = "optimal",
// CHECK-NEXT:  "comm.phase"() {algorithm = "halving_doubling", bytes = 2048 : i64, {{.*}}collective = "g.rs", dim = 0 : i64, {{.*}}order = array<i64: 1, 1, 1, 1>
// CHECK-NEXT:  "comm.phase"({{.*}}) {algorithm = "halving_doubling", bytes = 4096 : i64, {{.*}}collective = "g.rs", dim = 1 : i64, {{.*}}order = array<i64: 0, 0, 0, 0>
// CHECK-NEXT:  "comm.phase"({{.*}}) {algorithm = "halving_doubling", bytes = 4096 : i64, {{.*}}collective = "g.ag", dim = 1 : i64, {{.*}}order = array<i64: 1, 1, 1, 1>
// CHECK-NEXT:  "comm.phase"({{.*}}) {algorithm = "halving_doubling", bytes = 2048 : i64, {{.*}}collective = "g.ag", dim = 0 : i64, {{.*}}order = array<i64: 0, 0, 0, 0>
// CHECK-LABEL: IR Dump After choose-schedule

// the options given keep their values, --active-chunks fills the one left unset, the default the rest
// OPTS-LABEL: IR Dump After optimal-balance: optimal-balance{latency=false active=2 time-limit=1.5}
// OPTS:       module attributes {comm.balance = "OPTIMAL", comm.scheduler = "optimal",
