// The comm dialect: collectives on groups of topology dimensions, and the per-dimension phases they lower to.
// Loaded at run time with irdl.load_dialects; IRDL-defined ops print and parse in generic form.
// IRDL checks presence and kind of every required attribute; dialects/comm.py checks values (sizes > 0,
// dimensions in range, known algorithms) because IRDL cannot express them.
irdl.dialect @comm {
  // Completion of an op. An op that takes a token waits for the producer to finish; inside one buffer (the halves
  // and phases of one collective) it waits chunk by chunk: its chunk c starts once the producer's chunk c is done.
  irdl.type @token { }

  irdl.operation @all_reduce {
    %int = irdl.base "#builtin.integer"
    %dims = irdl.base "#builtin.dense_array"
    %str = irdl.base "#builtin.string"
    %tok = irdl.base @comm::@token
    irdl.operands(deps: variadic %tok)
    irdl.results(done: %tok)
    irdl.attributes { "bytes" = %int, "dims" = %dims, "name" = %str }
  }
  irdl.operation @reduce_scatter {
    %int = irdl.base "#builtin.integer"
    %dims = irdl.base "#builtin.dense_array"
    %str = irdl.base "#builtin.string"
    %tok = irdl.base @comm::@token
    irdl.operands(deps: variadic %tok)
    irdl.results(done: %tok)
    irdl.attributes { "bytes" = %int, "dims" = %dims, "name" = %str }
  }
  irdl.operation @all_gather {
    %int = irdl.base "#builtin.integer"
    %dims = irdl.base "#builtin.dense_array"
    %str = irdl.base "#builtin.string"
    %tok = irdl.base @comm::@token
    irdl.operands(deps: variadic %tok)
    irdl.results(done: %tok)
    irdl.attributes { "bytes" = %int, "dims" = %dims, "name" = %str }
  }
  irdl.operation @all_to_all {
    %int = irdl.base "#builtin.integer"
    %dims = irdl.base "#builtin.dense_array"
    %str = irdl.base "#builtin.string"
    %tok = irdl.base @comm::@token
    irdl.operands(deps: variadic %tok)
    irdl.results(done: %tok)
    irdl.attributes { "bytes" = %int, "dims" = %dims, "name" = %str }
  }
  irdl.operation @broadcast {
    %int = irdl.base "#builtin.integer"
    %root = irdl.base "#builtin.integer"
    %dims = irdl.base "#builtin.dense_array"
    %str = irdl.base "#builtin.string"
    %tok = irdl.base @comm::@token
    irdl.operands(deps: variadic %tok)
    irdl.results(done: %tok)
    irdl.attributes { "bytes" = %int, "dims" = %dims, "name" = %str, "root" = %root }
  }
  irdl.operation @reduce {
    %int = irdl.base "#builtin.integer"
    %root = irdl.base "#builtin.integer"
    %dims = irdl.base "#builtin.dense_array"
    %str = irdl.base "#builtin.string"
    %tok = irdl.base @comm::@token
    irdl.operands(deps: variadic %tok)
    irdl.results(done: %tok)
    irdl.attributes { "bytes" = %int, "dims" = %dims, "name" = %str, "root" = %root }
  }
  // Point to point: `src` sends `bytes` to `dst` (absolute ranks); the matching comm.recv names the same pair.
  irdl.operation @send {
    %int = irdl.base "#builtin.integer"
    %src = irdl.base "#builtin.integer"
    %dst = irdl.base "#builtin.integer"
    %str = irdl.base "#builtin.string"
    %tok = irdl.base @comm::@token
    irdl.operands(deps: variadic %tok)
    irdl.results(done: %tok)
    irdl.attributes { "bytes" = %int, "name" = %str, "src" = %src, "dst" = %dst }
  }
  irdl.operation @recv {
    %int = irdl.base "#builtin.integer"
    %src = irdl.base "#builtin.integer"
    %dst = irdl.base "#builtin.integer"
    %str = irdl.base "#builtin.string"
    %tok = irdl.base @comm::@token
    irdl.operands(deps: variadic %tok)
    irdl.results(done: %tok)
    irdl.attributes { "bytes" = %int, "name" = %str, "src" = %src, "dst" = %dst }
  }

  // One step of a hierarchical lowering: `kind` (reduce_scatter, all_gather, all_to_all) of the collective
  // `collective` over topology dimension `dim`, entered with `bytes` per NPU (summed over chunks), pipelined in
  // `chunks` chunks (dim = -1: every dimension of the group at once, for graph algorithms such as multitree).
  // `stage` is its position in the collective's chain; `group_bytes` and `group_dims` the collective's own size and
  // dimensions. Optional (the pinned IRDL cannot declare optional attributes; dialects/comm.py OPTIONAL does):
  // `algorithm` (select-algorithm), `order` (per chunk, this phase's position in the chunk's chain: themis,
  // optimal-balance, choose-schedule), `ports` (multitree's injection ports), `part_of` (the all_reduce whose half
  // it is), `fused` (1: the halves of a one-dimension all-reduce run as one pass, in_switch's reduce-and-multicast).
  // Collectives may carry `chunks` (input, or the chunk pass) and `part_of` (decompose-all-reduce) likewise.
  irdl.operation @phase {
    %bytes = irdl.base "#builtin.integer"
    %dim = irdl.base "#builtin.integer"
    %stage = irdl.base "#builtin.integer"
    %chunks = irdl.base "#builtin.integer"
    %coll = irdl.base "#builtin.string"
    %kind = irdl.base "#builtin.string"
    %group_bytes = irdl.base "#builtin.integer"
    %group_dims = irdl.base "#builtin.dense_array"
    %tok = irdl.base @comm::@token
    irdl.operands(deps: variadic %tok)
    irdl.results(done: %tok)
    irdl.attributes { "bytes" = %bytes, "dim" = %dim, "stage" = %stage, "chunks" = %chunks,
                      "collective" = %coll, "kind" = %kind, "group_bytes" = %group_bytes,
                      "group_dims" = %group_dims }
  }

  // Decisions passes record for phases over the whole network (dim = -1). Each yields a token the phases that run
  // on it take as an operand, so the lowering finds the structure through the IR, never by a name.
  //
  // MultiTree's spanning trees (the allocate-trees pass): tree r's node v joined it in time step step[r*npus + v]
  // (1-based; 0 for the root) from parent[r*npus + v] (-1 for the root) over link[r*npus + v] (its id in the
  // network's link numbering, network/links.py; -1 where tree edges are paths routed through switches). `steps`
  // is the trees' height in time steps; `method` how they were found: translated, greedy, cp-sat or paths.
  irdl.operation @trees {
    %npus = irdl.base "#builtin.integer"
    %steps = irdl.base "#builtin.integer"
    %parent = irdl.base "#builtin.dense_array"
    %step = irdl.base "#builtin.dense_array"
    %link = irdl.base "#builtin.dense_array"
    %method = irdl.base "#builtin.string"
    %tok = irdl.base @comm::@token
    irdl.results(done: %tok)
    irdl.attributes { "npus" = %npus, "steps" = %steps, "parent" = %parent, "step" = %step, "link" = %link,
                      "method" = %method }
  }
  // A ring over the whole network (the find-cycle pass): the NPUs in the order of a Hamiltonian cycle of links.
  irdl.operation @cycle {
    %array = irdl.base "#builtin.dense_array"
    %tok = irdl.base @comm::@token
    irdl.results(done: %tok)
    irdl.attributes { "order" = %array }
  }
  // A placement of virtual ranks on NPUs (the place-ranks pass, for hdrm): virtual rank r runs on NPU ranks[r].
  irdl.operation @placement {
    %array = irdl.base "#builtin.dense_array"
    %tok = irdl.base @comm::@token
    irdl.results(done: %tok)
    irdl.attributes { "ranks" = %array }
  }
}
