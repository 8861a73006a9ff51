// choose-schedule: times CP-SAT's orders, Themis's and the baseline's on the run's cost model and keeps the
// fastest, recording which (comm.schedule) and each one's time in ns. Here CP-SAT's estimate ties and it returns
// the baseline's orders (every chunk ascending: 1545.879 ns); Themis's alternate the chunks' first dimension and
// run in 1389.291 ns, so the module takes over Themis's orders and bytes.
// RUN: astra-compile %s --topology "Switch(2)_Switch(4)" --bandwidth 50 --latency 1 --print-ir-after-all --emit mlir 2>&1 | filecheck %s

module {
  %0 = "comm.all_reduce"() {bytes = 65536 : i64, chunks = 2 : i64, dims = array<i64: 0, 1>, name = "g"} : () -> !comm.token
}

// CHECK-LABEL: IR Dump After optimal-balance
// CHECK-NOT:   comm.schedule =
// CHECK:       "comm.phase"() {algorithm = "halving_doubling", bytes = 65536 : i64, {{.*}}collective = "g.rs", dim = 0 : i64, {{.*}}order = array<i64: 0, 0>
// CHECK-LABEL: IR Dump After choose-schedule: choose-schedule{latency=true active=1}
// CHECK:       module attributes {comm.balance = "OPTIMAL", comm.baseline_time_ns = 1545.87890625 : f64, comm.cp_sat_time_ns = 1545.87890625 : f64, comm.schedule = "themis", comm.scheduler = "optimal", comm.themis_time_ns = 1389.291015625 : f64,
// CHECK-NEXT:  "comm.phase"() {algorithm = "halving_doubling", bytes = 40960 : i64, {{.*}}collective = "g.rs", dim = 0 : i64, {{.*}}order = array<i64: 0, 1>
// CHECK-NEXT:  "comm.phase"({{.*}}) {algorithm = "halving_doubling", bytes = 49152 : i64, {{.*}}collective = "g.rs", dim = 1 : i64, {{.*}}order = array<i64: 1, 0>
// CHECK-NEXT:  "comm.phase"({{.*}}) {algorithm = "halving_doubling", bytes = 49152 : i64, {{.*}}collective = "g.ag", dim = 1 : i64, {{.*}}order = array<i64: 0, 1>
// CHECK-NEXT:  "comm.phase"({{.*}}) {algorithm = "halving_doubling", bytes = 40960 : i64, {{.*}}collective = "g.ag", dim = 0 : i64, {{.*}}order = array<i64: 1, 0>
