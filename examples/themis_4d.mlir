// Seed 001's 4D-Ring_FC_Ring_SW network (375/175/150/100 GB/s, 20/700/700/1700 ns, 1024 NPUs): a 1GB gradient
// all-reduce in 16 chunks. Compare the schedulers with:
//   astra-compile examples/themis_4d.mlir --compare
module attributes {
  comm.topology = "Ring(4)_FullyConnected(8)_Ring(4)_Switch(8)",
  comm.blocks = ["Ring", "FullyConnected", "Ring", "Switch"],
  comm.shape = array<i64: 4, 8, 4, 8>,
  comm.bandwidth_gbps = array<f64: 375.0, 175.0, 150.0, 100.0>,
  comm.latency_ns = array<f64: 20.0, 700.0, 700.0, 1700.0>,
  comm.links = array<i64: 1, 1, 1, 1>
} {
  %0 = "comm.all_reduce"() {bytes = 1073741824 : i64, dims = array<i64: 0, 1, 2, 3>, name = "grads", chunks = 16 : i64} : () -> !comm.token
}
