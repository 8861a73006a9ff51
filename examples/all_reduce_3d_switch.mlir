// Seed 000's Themis demo network: a 1GB all-reduce on a 512-NPU 3D switch, 50 GB/s and 1 ns per dimension,
// pipelined in 64 chunks. Run it with:  astra-compile examples/all_reduce_3d_switch.mlir
module attributes {
  comm.topology = "Switch(8)_Switch(8)_Switch(8)",
  comm.blocks = ["Switch", "Switch", "Switch"],
  comm.shape = array<i64: 8, 8, 8>,
  comm.bandwidth_gbps = array<f64: 50.0, 50.0, 50.0>,
  comm.latency_ns = array<f64: 1.0, 1.0, 1.0>,
  comm.links = array<i64: 1, 1, 1>
} {
  %0 = "comm.all_reduce"() {bytes = 1073741824 : i64, dims = array<i64: 0, 1, 2>, name = "grads", chunks = 64 : i64} : () -> !comm.token
}
