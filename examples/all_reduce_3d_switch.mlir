// The ASTRA-sim tutorial's Themis demo network: a 1GB all-reduce on a 512-NPU 3D switch, 50 GB/s and 1 ns per
// dimension, pipelined in 64 chunks. Run it with:  astra-compile examples/all_reduce_3d_switch.mlir
module attributes {
  comm.topology = {name = "Switch(8)_Switch(8)_Switch(8)", dims = [
    {block = "Switch", size = 8, bandwidth_gbps = 50.0, latency_ns = 1.0, links = 1},
    {block = "Switch", size = 8, bandwidth_gbps = 50.0, latency_ns = 1.0, links = 1},
    {block = "Switch", size = 8, bandwidth_gbps = 50.0, latency_ns = 1.0, links = 1}
  ]}
} {
  %0 = "comm.all_reduce"() {bytes = 1073741824 : i64, dims = array<i64: 0, 1, 2>, name = "grads", chunks = 64 : i64} : () -> !comm.token
}
