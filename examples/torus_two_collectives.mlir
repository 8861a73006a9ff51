// An 8x8 torus (100 GB/s per dimension: 50 GB/s per link and direction, 500 ns): a 256MB all-reduce followed by
// a 64MB all-to-all along dimension 1, which waits for it. Try:
//   astra-compile examples/torus_two_collectives.mlir --backend congestion
//   astra-compile examples/torus_two_collectives.mlir --backend congestion --execution full --timeline trace.json
module attributes {
  comm.topology = {name = "Ring(8)_Ring(8)", dims = [
    {block = "Ring", size = 8, bandwidth_gbps = 100.0, latency_ns = 500.0, links = 1},
    {block = "Ring", size = 8, bandwidth_gbps = 100.0, latency_ns = 500.0, links = 1}
  ]}
} {
  %0 = "comm.all_reduce"() {bytes = 268435456 : i64, dims = array<i64: 0, 1>, name = "grads", chunks = 8 : i64} : () -> !comm.token
  %1 = "comm.all_to_all"(%0) {bytes = 67108864 : i64, dims = array<i64: 1>, name = "tokens", chunks = 8 : i64} : (!comm.token) -> !comm.token
}
