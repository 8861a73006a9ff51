module attributes {comm.topology = {dims = [{bandwidth_gbps = 5.000000e+01 : f64, block = "Ring", latency_ns = 5.000000e+02 : f64, links = 1 : i64, size = 2 : i64}], name = "Ring(2)"}, wl.mesh = "", wl.source = "two ranks with shapes", wl.spmd = false, wl.world_size = 2 : i64} {
  module attributes {wl.groups = {"0" = array<i64: 0, 1>}, wl.rank = 0 : i64} {
    %0 = "wl.compute"() {bytes = 1048576 : i64, flops = 1073741824 : i64, name = "aten.mm.default", wl.phase = "forward", wl.shapes = "512x1024,1024x1024"} : () -> !comm.token
    %1 = "comm.broadcast"(%0) {bytes = 65536 : i64, dims = array<i64: 0>, name = "broadcast_1", root = 1 : i64, wl.group = "0", wl.phase = "forward"} : (!comm.token) -> !comm.token
    %2 = "comm.all_reduce"(%1) {bytes = 1048576 : i64, dims = array<i64: 0>, name = "all_reduce_2", wl.group = "0", wl.phase = "backward"} : (!comm.token) -> !comm.token
    %3 = "wl.wait"(%2) {name = "wait"} : (!comm.token) -> !comm.token
    %4 = "wl.compute"(%3) {bytes = 1048576 : i64, flops = 1048576 : i64, name = "aten.add.default", wl.phase = "optimizer", wl.shapes = "1024x256,1024x256"} : (!comm.token) -> !comm.token
    %5 = "comm.send"(%4) {bytes = 4096 : i64, dst = 1 : i64, name = "send_5", src = 0 : i64, wl.phase = "optimizer"} : (!comm.token) -> !comm.token
  }
  module attributes {wl.groups = {"0" = array<i64: 0, 1>}, wl.rank = 1 : i64} {
    %0 = "wl.compute"() {bytes = 1048576 : i64, flops = 5368709120 : i64, name = "aten.mm.default", wl.dtype = "bf16", wl.phase = "forward", wl.shapes = "2560x1024,1024x1024"} : () -> !comm.token
    %1 = "comm.broadcast"(%0) {bytes = 65536 : i64, dims = array<i64: 0>, name = "broadcast_1", root = 1 : i64, wl.group = "0", wl.phase = "forward"} : (!comm.token) -> !comm.token
    %2 = "comm.all_reduce"(%1) {bytes = 1048576 : i64, dims = array<i64: 0>, name = "all_reduce_2", wl.group = "0", wl.phase = "backward"} : (!comm.token) -> !comm.token
    %3 = "wl.wait"(%2) {name = "wait"} : (!comm.token) -> !comm.token
    %4 = "wl.compute"(%3) {bytes = 1048576 : i64, flops = 1048576 : i64, name = "aten.add.default", wl.phase = "optimizer"} : (!comm.token) -> !comm.token
    %5 = "comm.recv"(%4) {bytes = 4096 : i64, dst = 1 : i64, name = "recv_5", src = 0 : i64, wl.phase = "optimizer"} : (!comm.token) -> !comm.token
  }
}
