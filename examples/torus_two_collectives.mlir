// An 8x8 torus (100 GB/s per dimension: 50 GB/s per link and direction, 500 ns): a 256MB all-reduce followed by
// a 64MB all-to-all along dimension 1, which waits for it. Try:
//   astra-compile examples/torus_two_collectives.mlir --backend congestion
//   astra-compile examples/torus_two_collectives.mlir --backend congestion --execution full --timeline trace.json
module attributes {
  comm.topology = "Ring(8)_Ring(8)",
  comm.blocks = ["Ring", "Ring"],
  comm.shape = array<i64: 8, 8>,
  comm.bandwidth_gbps = array<f64: 100.0, 100.0>,
  comm.latency_ns = array<f64: 500.0, 500.0>,
  comm.links = array<i64: 1, 1>
} {
  %0 = "comm.all_reduce"() {bytes = 268435456 : i64, dims = array<i64: 0, 1>, name = "grads", chunks = 8 : i64} : () -> !comm.token
  %1 = "comm.all_to_all"(%0) {bytes = 67108864 : i64, dims = array<i64: 1>, name = "tokens", chunks = 8 : i64} : (!comm.token) -> !comm.token
}
